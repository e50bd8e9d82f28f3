#ifndef LARDER_CZLIB_SHIM_H
#define LARDER_CZLIB_SHIM_H
#include <zlib.h>

/// deflateInit/inflateInit are macros; Swift cannot call them, so wrap them.
static inline int larder_deflateInit(z_streamp strm, int level) {
    return deflateInit(strm, level);
}
static inline int larder_inflateInit(z_streamp strm) {
    return inflateInit(strm);
}
#endif
