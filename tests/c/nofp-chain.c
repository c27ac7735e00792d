/* A workload built without frame pointers (-O2 -fomit-frame-pointer -fno-inline) with a
 * known call chain and known CPU shares, for the user-stack tests of lockpath:
 *
 *   main -> worker_loop -> spin_major_part (80% of the rounds' time)
 *                       -> spin_minor_part (20%)
 *
 * Each round spends a fixed amount of work in each hot function; the program measures
 * the thread CPU time each part really took and prints it at the end:
 *   major_ns=N minor_ns=N rounds=N pid=N
 * Usage: nofp-chain SECONDS
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static volatile unsigned long sink;

static unsigned long long thread_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

/* Local arrays so the functions have real frames to unwind through. */
__attribute__((noinline)) unsigned long spin_major_part(unsigned long iterations)
{
	unsigned long acc[8] = {1, 2, 3, 4, 5, 6, 7, 8};
	for (unsigned long i = 0; i < iterations; i++)
		acc[i & 7] = acc[i & 7] * 2862933555777941757ul + 3037000493ul + i;
	return acc[0] ^ acc[3] ^ acc[7];
}

__attribute__((noinline)) unsigned long spin_minor_part(unsigned long iterations)
{
	unsigned long acc[4] = {9, 8, 7, 6};
	for (unsigned long i = 0; i < iterations; i++)
		acc[i & 3] = acc[i & 3] * 6364136223846793005ul + 1442695040888963407ul + i;
	return acc[0] ^ acc[2];
}

__attribute__((noinline)) void worker_loop(double seconds)
{
	const unsigned long major = 830000, minor = 150000;
	unsigned long long major_ns = 0, minor_ns = 0, rounds = 0;
	unsigned long long start = thread_ns();
	while ((double)(thread_ns() - start) < seconds * 1e9) {
		unsigned long long t0 = thread_ns();
		sink += spin_major_part(major);
		unsigned long long t1 = thread_ns();
		sink += spin_minor_part(minor);
		unsigned long long t2 = thread_ns();
		major_ns += t1 - t0;
		minor_ns += t2 - t1;
		rounds++;
	}
	printf("major_ns=%llu minor_ns=%llu rounds=%llu pid=%d\n", major_ns, minor_ns, rounds,
	       (int)getpid());
	fflush(stdout);
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 3.0;
	worker_loop(seconds);
	return 0;
}
