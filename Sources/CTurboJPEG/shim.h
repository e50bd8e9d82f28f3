#ifndef LARDER_CTURBOJPEG_SHIM_H
#define LARDER_CTURBOJPEG_SHIM_H
// libjpeg-turbo (BSD-style licences), 2.x as Debian 12 ships it. TurboJPEG (tj*) encodes thumbnails; photos are
// decoded through the libjpeg API below, which TurboJPEG 2.x does not expose, so that each decode can be given a
// memory cap (the decompress object's max_memory_to_use) and its colour space checked before anything is allocated.
#include <setjmp.h>
#include <stdio.h>
#include <string.h>
#include <jpeglib.h>
#include <jerror.h>
#include <turbojpeg.h>

/// What larder_jpeg_decode answers.
enum {
    LARDER_JPEG_OK = 0,
    /// The bytes do not decode, or a decoder warning (a damaged or cut scan) was raised; the message says which.
    LARDER_JPEG_UNDECODABLE = 1,
    /// The decode would hold more than its memory cap (libjpeg asked for backing store, which is not available).
    LARDER_JPEG_OVER_MEMORY = 2,
    /// The colour space does not convert to RGB (CMYK, YCCK): refused before anything is allocated for the image.
    LARDER_JPEG_UNSUPPORTED_COLOR_SPACE = 3,
};

/// The most scans a photo may have: libjpeg would otherwise go on through any number of tiny scans.
#define LARDER_JPEG_MAX_SCANS 500

typedef struct {
    struct jpeg_error_mgr manager;
    struct jpeg_progress_mgr progress;
    jmp_buf jump;
    char *message;
} larder_jpeg_failure;

static inline void larder_jpeg_fail(j_common_ptr cinfo) {
    larder_jpeg_failure *failure = (larder_jpeg_failure *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, failure->message);
    longjmp(failure->jump, 1);
}

// A warning (level -1: corrupt data that libjpeg would fill with grey) fails the decode like an error.
static inline void larder_jpeg_emit(j_common_ptr cinfo, int level) {
    if (level < 0) larder_jpeg_fail(cinfo);
}

static inline void larder_jpeg_count_scans(j_common_ptr cinfo) {
    if (!cinfo->is_decompressor) return;
    j_decompress_ptr d = (j_decompress_ptr)cinfo;
    if (d->input_scan_number > LARDER_JPEG_MAX_SCANS) {
        larder_jpeg_failure *failure = (larder_jpeg_failure *)cinfo->err;
        snprintf(failure->message, JMSG_LENGTH_MAX, "the photo has more than %d scans", LARDER_JPEG_MAX_SCANS);
        longjmp(failure->jump, 1);
    }
}

/// Decodes `bytes` to RGB at 1/`scale_denom` of its size into `rgb` (`width` × `height` × 3 bytes, which must be the
/// scaled size), holding at most `max_memory` bytes in libjpeg's large buffers (the coefficients of a photo decoded
/// whole). `message` (JMSG_LENGTH_MAX bytes) says why when the answer is not LARDER_JPEG_OK.
static inline int larder_jpeg_decode(
    const unsigned char *bytes, unsigned long length, unsigned int scale_denom, long max_memory,
    unsigned char *rgb, unsigned int width, unsigned int height, char *message)
{
    struct jpeg_decompress_struct cinfo;
    larder_jpeg_failure failure;
    message[0] = 0;
    cinfo.err = jpeg_std_error(&failure.manager);
    failure.manager.error_exit = larder_jpeg_fail;
    failure.manager.emit_message = larder_jpeg_emit;
    failure.message = message;
    if (setjmp(failure.jump)) {
        int code = failure.manager.msg_code == JERR_NO_BACKING_STORE ? LARDER_JPEG_OVER_MEMORY : LARDER_JPEG_UNDECODABLE;
        jpeg_destroy_decompress(&cinfo);
        return code;
    }
    jpeg_create_decompress(&cinfo);
    cinfo.mem->max_memory_to_use = max_memory;
    failure.progress.progress_monitor = larder_jpeg_count_scans;
    cinfo.progress = &failure.progress;
    jpeg_mem_src(&cinfo, bytes, length);
    jpeg_read_header(&cinfo, TRUE);
    if (cinfo.jpeg_color_space != JCS_GRAYSCALE && cinfo.jpeg_color_space != JCS_YCbCr
        && cinfo.jpeg_color_space != JCS_RGB) {
        snprintf(message, JMSG_LENGTH_MAX, "its colour space (%s) does not convert to RGB",
                 cinfo.jpeg_color_space == JCS_CMYK ? "CMYK" : cinfo.jpeg_color_space == JCS_YCCK ? "YCCK" : "unknown");
        jpeg_destroy_decompress(&cinfo);
        return LARDER_JPEG_UNSUPPORTED_COLOR_SPACE;
    }
    cinfo.out_color_space = JCS_RGB;
    cinfo.scale_num = 1;
    cinfo.scale_denom = scale_denom;
    jpeg_start_decompress(&cinfo);
    if (cinfo.output_width != width || cinfo.output_height != height || cinfo.output_components != 3) {
        snprintf(message, JMSG_LENGTH_MAX, "it decodes to %u x %u, not the %u x %u its header gave",
                 cinfo.output_width, cinfo.output_height, width, height);
        jpeg_destroy_decompress(&cinfo);
        return LARDER_JPEG_UNDECODABLE;
    }
    size_t stride = (size_t)width * 3;
    while (cinfo.output_scanline < cinfo.output_height) {
        JSAMPROW rows[16];
        unsigned int count = cinfo.output_height - cinfo.output_scanline;
        if (count > 16) count = 16;
        for (unsigned int i = 0; i < count; i++) rows[i] = rgb + (size_t)(cinfo.output_scanline + i) * stride;
        jpeg_read_scanlines(&cinfo, rows, count);
    }
    jpeg_finish_decompress(&cinfo);
    jpeg_destroy_decompress(&cinfo);
    return LARDER_JPEG_OK;
}
#endif
