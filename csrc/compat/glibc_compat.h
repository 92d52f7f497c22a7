/* Forced into every native file graphsignal ships (gcc -include), so that a
 * library built on a new glibc still loads on an old one: the glibc floor
 * stays at 2.17, the manylinux2014 level.
 *
 * glibc bumps a symbol's default version when it moves or changes it (2.34
 * moved libdl and libpthread into libc and gave their functions a
 * GLIBC_2.34 default; 2.33 made fstat a real function). A reference built
 * against new headers binds to the new version, and the loader of an older
 * glibc refuses the library. Each line below binds one symbol graphsignal
 * uses to the version it had before the bump: the same function, only the
 * name under which the old glibc exports it. Only symbols whose old version
 * is exactly the same function are listed (not, e.g., the pre-2.3.2
 * pthread_cond_* ABI); tests/test_install.py checks every shipped binary
 * with objdump, so a new symbol shows up there.
 *
 * x86_64 only (its base version is GLIBC_2.2.5); elsewhere this header does
 * nothing and the build needs the glibc it was built on.
 */
#ifndef GRAPHSIGNAL_GLIBC_COMPAT_H
#define GRAPHSIGNAL_GLIBC_COMPAT_H

#include <features.h> /* __GLIBC__; includes nothing else */

#if defined(__x86_64__) && defined(__GLIBC__) && !defined(GRAPHSIGNAL_NO_GLIBC_COMPAT)
#if __GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34)
__asm__(".symver dlopen,dlopen@GLIBC_2.2.5");
/* the CUDA interposer (csrc/interpose) defines dlsym itself: binding its
 * definition to a version would hide it from the workload's references */
#ifndef GRAPHSIGNAL_DEFINES_DLSYM
__asm__(".symver dlsym,dlsym@GLIBC_2.2.5");
#endif
__asm__(".symver dlvsym,dlvsym@GLIBC_2.2.5");
__asm__(".symver dlclose,dlclose@GLIBC_2.2.5");
__asm__(".symver dlerror,dlerror@GLIBC_2.2.5");
__asm__(".symver dladdr,dladdr@GLIBC_2.2.5");
__asm__(".symver pthread_create,pthread_create@GLIBC_2.2.5");
__asm__(".symver pthread_detach,pthread_detach@GLIBC_2.2.5");
__asm__(".symver pthread_join,pthread_join@GLIBC_2.2.5");
__asm__(".symver pthread_once,pthread_once@GLIBC_2.2.5");
__asm__(".symver pthread_key_create,pthread_key_create@GLIBC_2.2.5");
__asm__(".symver pthread_key_delete,pthread_key_delete@GLIBC_2.2.5");
__asm__(".symver pthread_getspecific,pthread_getspecific@GLIBC_2.2.5");
__asm__(".symver pthread_setspecific,pthread_setspecific@GLIBC_2.2.5");
__asm__(".symver pthread_mutex_trylock,pthread_mutex_trylock@GLIBC_2.2.5");
__asm__(".symver pthread_mutexattr_init,pthread_mutexattr_init@GLIBC_2.2.5");
__asm__(".symver pthread_mutexattr_settype,pthread_mutexattr_settype@GLIBC_2.2.5");
__asm__(".symver pthread_sigmask,pthread_sigmask@GLIBC_2.2.5");
__asm__(".symver pthread_rwlock_rdlock,pthread_rwlock_rdlock@GLIBC_2.2.5");
__asm__(".symver pthread_rwlock_wrlock,pthread_rwlock_wrlock@GLIBC_2.2.5");
__asm__(".symver pthread_rwlock_unlock,pthread_rwlock_unlock@GLIBC_2.2.5");
#endif
#if __GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33)
/* fstat was an inline wrapper of __fxstat (version 1 of struct stat on
 * x86_64) until 2.33; 2.33+ still exports __fxstat for old binaries. */
#include <sys/stat.h>
#ifdef __cplusplus
extern "C" {
#endif
extern int __fxstat(int ver, int fd, struct stat* buf);
#ifdef __cplusplus
}
#endif
__asm__(".symver __fxstat,__fxstat@GLIBC_2.2.5");
static inline int graphsignal_compat_fstat_(int fd, struct stat* buf) { return __fxstat(1, fd, buf); }
#define fstat(fd, buf) graphsignal_compat_fstat_((fd), (buf))
#endif
#endif /* x86_64 glibc */

#ifdef __cplusplus
/* libstdc++ headers of gcc 10+ wait on condition variables with
 * pthread_cond_clockwait (glibc 2.30+) and lock with
 * pthread_mutex_clocklock (2.30+) when the build's glibc has them; the
 * fallback uses pthread_cond_timedwait (every glibc). <bits/c++config.h>
 * is where libstdc++ decides; undefining after it keeps the fallback. */
#if defined(__GLIBC__) && !defined(GRAPHSIGNAL_NO_GLIBC_COMPAT) && __has_include(<bits/c++config.h>)
#include <bits/c++config.h>
#undef _GLIBCXX_USE_PTHREAD_COND_CLOCKWAIT
#undef _GLIBCXX_USE_PTHREAD_MUTEX_CLOCKLOCK
#undef _GLIBCXX_USE_PTHREAD_RWLOCK_CLOCKLOCK
#endif
#endif

#endif /* GRAPHSIGNAL_GLIBC_COMPAT_H */
