// Linux interfaces that the toolchain's Glibc module does not import.
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
