// LD_PRELOAD helper for a crash on the device: prints the native stack on SIGSEGV/SIGABRT
// (Python's faulthandler shows only the Python frames). Build: gcc -shared -fPIC -o segv.so segv_trace.c
#define _GNU_SOURCE
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void on_fault(int sig) {
  void* frames[64];
  int n = backtrace(frames, 64);
  dprintf(2, "\n[segv_trace] signal %d, %d native frames:\n", sig, n);
  backtrace_symbols_fd(frames, n, 2);
  signal(sig, SIG_DFL);
  raise(sig);
}

__attribute__((constructor)) static void install(void) {
  signal(SIGSEGV, on_fault);
  signal(SIGABRT, on_fault);
}
