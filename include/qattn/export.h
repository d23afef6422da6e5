/* What libqattn.so exports. The library is compiled with -fvisibility=hidden (and inline functions
 * hidden), so a symbol is visible to applications only when its declaration is marked here:
 *   QATTN_API                          one declaration (the C API in qattn/qattn.h);
 *   QATTN_PUBLIC_BEGIN / _END          every declaration between them (the body of each public C++
 *                                      header in include/qattn/: its classes, their typeinfo and vtables,
 *                                      and its functions; the namespace is the documented API);
 *   QATTN_LOCAL                        a nested class of a public class that stays internal (a class
 *                                      nested in an exported one is exported too unless marked).
 * Internal code (qattn::rt, qattn::cache, the generator's renderer, SQLite, ...) stays hidden, so it
 * cannot clash with an application's own copies and can change without an ABI promise. Tests, the CLI
 * and the benchmarks that call internal functions link the static component libraries instead.
 * C and C++ (a C header includes this file). */
#ifndef QATTN_EXPORT_H_
#define QATTN_EXPORT_H_

#if defined(__GNUC__) || defined(__clang__)
#define QATTN_API __attribute__((visibility("default")))
#define QATTN_PUBLIC_BEGIN _Pragma("GCC visibility push(default)")
#define QATTN_PUBLIC_END _Pragma("GCC visibility pop")
#define QATTN_LOCAL __attribute__((visibility("hidden")))
#else
#define QATTN_API
#define QATTN_PUBLIC_BEGIN
#define QATTN_PUBLIC_END
#define QATTN_LOCAL
#endif

#endif /* QATTN_EXPORT_H_ */
