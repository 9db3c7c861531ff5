/*
 * A clock that is wrong on purpose, for one process: LD_PRELOAD this
 * library and either
 *   - set TESTKIT_CLOCK_SHIFT_MS: CLOCK_REALTIME (and time(),
 *     gettimeofday()) read that many milliseconds ahead (or behind, when
 *     negative), for the whole life of the process; or
 *   - set TESTKIT_CLOCK_SHIFT_FILE to a file holding two numbers,
 *     "REALTIME_MS BOOTTIME_MS": the wall clock is shifted by the first and
 *     CLOCK_BOOTTIME by the second, re-read at most every 20 ms, so a test
 *     can step a running process's clock. A wall clock that jumps is the
 *     first number alone; a suspended host is both by the same amount
 *     (while it sleeps, the wall and boot clocks go on and the monotonic
 *     clock stops: shifting the first two ahead of it is the same thing).
 * CLOCK_MONOTONIC is never touched, so timers and timeouts behave.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static int (*real_clock_gettime)(clockid_t, struct timespec *);

static long long now_ns(clockid_t id) {
    struct timespec ts;
    real_clock_gettime(id, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* The file's shifts, in ns, and when they were read (monotonic ns). */
static long long file_shift[2];
static long long file_read_at = -1;

static void read_file(void) {
    const char *path = getenv("TESTKIT_CLOCK_SHIFT_FILE");
    if (!path) return;
    long long now = now_ns(CLOCK_MONOTONIC);
    long long last = __atomic_load_n(&file_read_at, __ATOMIC_ACQUIRE);
    if (last >= 0 && now - last < 20000000LL) return;
    /* open/read/close: no allocation, so nothing here calls back in. */
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    char buf[128];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return;
    buf[n] = 0;
    char *end;
    long long wall = strtoll(buf, &end, 10);
    long long boot = strtoll(end, NULL, 10);
    __atomic_store_n(&file_shift[0], wall * 1000000LL, __ATOMIC_RELAXED);
    __atomic_store_n(&file_shift[1], boot * 1000000LL, __ATOMIC_RELAXED);
    __atomic_store_n(&file_read_at, now, __ATOMIC_RELEASE);
}

static long long shift_ns(clockid_t id) {
    int wall = id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE;
    int boot = id == CLOCK_BOOTTIME;
    if (!wall && !boot) return 0;
    if (getenv("TESTKIT_CLOCK_SHIFT_FILE")) {
        read_file();
        return __atomic_load_n(&file_shift[wall ? 0 : 1], __ATOMIC_RELAXED);
    }
    const char *ms = getenv("TESTKIT_CLOCK_SHIFT_MS");
    return wall && ms ? atoll(ms) * 1000000LL : 0;
}

static void shift(struct timespec *ts, long long by) {
    long long ns = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + by;
    ts->tv_sec = ns / 1000000000LL;
    ts->tv_nsec = ns % 1000000000LL;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    if (!real_clock_gettime)
        real_clock_gettime = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
    int result = real_clock_gettime(id, ts);
    if (result == 0) {
        long long by = shift_ns(id);
        if (by) shift(ts, by);
    }
    return result;
}

int gettimeofday(struct timeval *tv, void *tz) {
    struct timespec ts;
    int result = clock_gettime(CLOCK_REALTIME, &ts);
    (void)tz;
    if (result == 0 && tv) {
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    return result;
}

time_t time(time_t *t) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (t) *t = ts.tv_sec;
    return ts.tv_sec;
}
