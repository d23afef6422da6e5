/* CPU checks of the versioned options: defaults, struct_size rules, the shipped cache option, and the
 * first, unversioned qattn_runtime_create. */
#include <string.h>

#include "c_api_check.h"

/* A caller compiled against a newer header: qattn_options plus a field this library does not know. */
typedef struct newer_options {
  qattn_options known;
  long long future_field;
} newer_options;

static void check_defaults(void) {
  qattn_options o;
  memset(&o, 0x5a, sizeof o);
  CHECK_STATUS(qattn_options_init(&o, sizeof o), QATTN_OK, NULL);
  CHECK(o.struct_size == sizeof o);
  CHECK(o.cache_path == NULL && o.shipped_cache_path == NULL);
  CHECK(o.use_cache == 1 && o.read_only == 0 && o.tune == 1 && o.device == 0);
  CHECK_STATUS(qattn_options_init(NULL, sizeof o), QATTN_BAD_INPUT, "options is NULL");
  CHECK_STATUS(qattn_options_init(&o, 4), QATTN_BAD_INPUT, "struct_size 4 is below");

  newer_options n;
  memset(&n, 0x5a, sizeof n);
  CHECK_STATUS(qattn_options_init(&n.known, sizeof n), QATTN_OK, NULL);
  CHECK(n.known.struct_size == sizeof n && n.future_field == 0);   /* what the library does not know: zero */
}

static void check_open(void) {
  qattn_options o;
  qattn_runtime* rt = (qattn_runtime*)1;
  qattn_options_init(&o, sizeof o);
  o.use_cache = 0;
  CHECK_STATUS(qattn_runtime_open(&o, NULL), QATTN_BAD_INPUT, "out is NULL");
  CHECK_STATUS(qattn_runtime_open(&o, &rt), QATTN_OK, NULL);
  CHECK(rt != NULL);
  qattn_runtime_destroy(rt);

  o.struct_size = 8;
  CHECK_STATUS(qattn_runtime_open(&o, &rt), QATTN_BAD_INPUT, "struct_size 8 is below");
  CHECK(rt == NULL);

  newer_options n;
  qattn_options_init(&n.known, sizeof n);
  n.known.use_cache = 0;
  CHECK_STATUS(qattn_runtime_open(&n.known, &rt), QATTN_OK, NULL);   /* unknown field at its default */
  qattn_runtime_destroy(rt);
  n.future_field = 3;
  CHECK_STATUS(qattn_runtime_open(&n.known, &rt), QATTN_BAD_INPUT, "does not know");
  CHECK(rt == NULL);
}

/* The shipped cache path reaches the runtime: a file that is not there is reported by qattn_cache_status
 * (the runtime keeps working without that layer). */
static void check_shipped_cache(const char* dir) {
  char user[512], shipped[512], status[1024] = "unset";
  qattn_options o;
  qattn_runtime* rt = NULL;
  snprintf(user, sizeof user, "%s/c_api_user.db", dir);
  snprintf(shipped, sizeof shipped, "%s/no_such_dir/shipped.db", dir);
  qattn_options_init(&o, sizeof o);
  o.cache_path = user;
  o.shipped_cache_path = shipped;
  CHECK_STATUS(qattn_runtime_open(&o, &rt), QATTN_OK, NULL);
  if (!rt) return;
  CHECK_STATUS(qattn_cache_status(rt, status, sizeof status), QATTN_OK, NULL);
  CHECK(strstr(status, shipped) != NULL);
  CHECK(strstr(status, "shipped") != NULL);
  qattn_runtime_destroy(rt);
}

/* Old callers: qattn_runtime_options and qattn_runtime_create unchanged. */
static void check_first_version(void) {
  qattn_runtime_options v1 = qattn_default_options();
  qattn_runtime* rt = NULL;
  CHECK(v1.use_cache == 1 && v1.tune == 1 && v1.read_only == 0 && v1.device == 0 && v1.cache_path == NULL);
  v1.use_cache = 0;
  CHECK_STATUS(qattn_runtime_create(&v1, &rt), QATTN_OK, NULL);
  CHECK(rt != NULL);
  qattn_runtime_destroy(rt);
  CHECK_STATUS(qattn_runtime_create(&v1, NULL), QATTN_BAD_INPUT, "out is NULL");
}

void check_options(const char* dir) {
  check_defaults();
  check_open();
  check_shipped_cache(dir);
  check_first_version();
}
