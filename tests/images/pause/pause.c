/*
 * The Pod sandbox's pause process for tests/images/build.sh: a stand-in for Kubernetes' own.
 * It holds the Pod's namespaces open, reaps the zombies it inherits as PID 1 (SIGCHLD) and
 * exits 0 on SIGTERM or SIGINT. Built with `gcc -Os -static`; nothing else is in its image.
 */
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int sig) {
  (void)sig;
  _exit(0);
}

static void on_child(int sig) {
  (void)sig;
  /* Several children may exit for one delivered SIGCHLD: reap every one that is ready. */
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

static int handle(int sig, void (*fn)(int), int flags) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = fn;
  sa.sa_flags = flags;
  sigemptyset(&sa.sa_mask);
  return sigaction(sig, &sa, NULL);
}

int main(void) {
  if (handle(SIGTERM, on_stop, 0) || handle(SIGINT, on_stop, 0) ||
      handle(SIGCHLD, on_child, SA_NOCLDSTOP | SA_RESTART)) {
    static const char msg[] = "pause: sigaction failed\n";
    (void)!write(2, msg, sizeof msg - 1);
    return 1;
  }
  for (;;)
    pause(); /* Returns after each handled signal; the stop handlers never return. */
}
