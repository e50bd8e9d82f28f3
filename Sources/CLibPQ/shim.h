#ifndef LARDER_CLIBPQ_SHIM_H
#define LARDER_CLIBPQ_SHIM_H
#include <libpq-fe.h>
#endif
