/* The GPU part's format calibration: one quantized candidate of an fp16 prefill reference measured on
 * random Q, K, V; the decision names the layer and chooses the candidate or the reference. */
#include <stdlib.h>
#include <string.h>

#include "c_api_check.h"
#include "c_api_host.h"

#define CAL_S 128
#define CAL_H 2
#define CAL_D 64

void check_format_calibration_gpu(qattn_runtime* rt) {
  const char* reference = "prefill qk=fp16 pv=fp16 out=fp16 d=64";
  const char* candidate[1] = {"prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=64"};
  const size_t n = (size_t)CAL_S * CAL_H * CAL_D;
  uint16_t* host = malloc(2 * n);
  uint64_t state = 7;
  devptr x[3];
  qattn_tensor t[3];
  qattn_shape shape = {1, CAL_H, CAL_H, CAL_S, CAL_S};
  qattn_format_calibration_options o;
  char chosen[256] = "", json[1 << 14] = "";
  size_t needed = 0, i;
  int j;
  fprintf(stderr, "-- calibrate_format %s\n", candidate[0]);
  for (j = 0; j < 3; ++j) {
    for (i = 0; i < n; ++i) host[i] = float_to_half((float)next_normal(&state));
    x[j] = dev_alloc(2 * n);
    dev_upload(x[j], host, 2 * n);
    t[j].data = DEV(x[j]);
    t[j].sb = (int64_t)CAL_S * CAL_H * CAL_D, t[j].sh = CAL_D, t[j].ss = CAL_H * CAL_D;   /* [b, s, h, d] */
  }
  qattn_format_calibration_options_init(&o, sizeof o);
  o.candidates = candidate, o.candidates_count = 1;
  o.inputs = "c_api_program random normal";
  CHECK_STATUS(qattn_calibrate_format(rt, "c_api.layer0", reference, shape, t[0], t[1], t[2], &o, chosen, sizeof chosen,
                                      json, sizeof json, &needed),
               QATTN_OK, NULL);
  fprintf(stderr, "   chosen: %s\n", chosen);
  CHECK(strstr(chosen, "prefill qk=") == chosen);
  CHECK(strstr(chosen, "int8") != NULL || strstr(chosen, "qk=fp16") != NULL);
  CHECK(needed == strlen(json) + 1 && strstr(json, "qattn.quant_format") && strstr(json, "c_api.layer0"));
  for (j = 0; j < 3; ++j) dev_free(x[j]);
  free(host);
}
