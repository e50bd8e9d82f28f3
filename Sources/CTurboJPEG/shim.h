#ifndef LARDER_CTURBOJPEG_SHIM_H
#define LARDER_CTURBOJPEG_SHIM_H
// libjpeg-turbo's TurboJPEG API (BSD-style licences), 2.x (tj*) as Debian 12 ships it: thumbnails of stored photos,
// with scaled decoding (1/2, 1/4, 1/8 of the size decoded from the DCT coefficients directly).
#include <turbojpeg.h>
#endif
