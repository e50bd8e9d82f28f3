#ifndef LARDER_CLIBDEFLATE_SHIM_H
#define LARDER_CLIBDEFLATE_SHIM_H
// libdeflate (MIT): its CRC-32 (the polynomial zlib's crc32 uses, the same results) folds with PCLMULQDQ, about 3.5x
// zlib 1.2.13's per byte here, for BLOB_UPLOAD_CHUNK's checksum.
#include <libdeflate.h>
#endif
