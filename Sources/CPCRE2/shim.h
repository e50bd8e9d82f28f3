#ifndef LARDER_CPCRE2_SHIM_H
#define LARDER_CPCRE2_SHIM_H
/// PCRE2's 8-bit library (UTF-8 subjects); its functions reach Swift under their `_8` names (`pcre2_compile_8`),
/// since the unsuffixed ones are macros.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#endif
