// Linux interfaces that the toolchain's Glibc module does not import (malloc.h: malloc_trim).
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <malloc.h>
