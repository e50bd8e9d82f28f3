#ifndef LARDER_CICU_SHIM_H
#define LARDER_CICU_SHIM_H
/// ICU's collators for sorts under a collation (`SortKey.collation`). ICU's C functions carry its version in their
/// linked names (`ucol_open_72`) through macros Swift cannot call, so these inline wrappers are what Swift sees.
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
// Only ICU's version macros: its other headers would clash, in any Swift module that also imports Foundation, with
// the copy of ICU Foundation carries (`_FoundationICU`, another version under the same names). The few functions used
// are declared here under the system ICU's linked names; `int` stands for `UErrorCode` (0 success, above 0 failure,
// below 0 a warning) and for `UCollationResult` (-1, 0, 1), `void` for `UCollator`.
#include <unicode/uvernum.h>

#define LARDER_ICU(name) U_ICU_ENTRY_POINT_RENAME(name)
int32_t LARDER_ICU(uloc_forLanguageTag)(const char *tag, char *locale, int32_t capacity, int32_t *parsed, int *status);
int32_t LARDER_ICU(uloc_getLanguage)(const char *locale, char *language, int32_t capacity, int *status);
int32_t LARDER_ICU(uloc_setKeywordValue)(const char *name, const char *value, char *locale, int32_t capacity, int *status);
int32_t LARDER_ICU(uloc_toLanguageTag)(const char *locale, char *tag, int32_t capacity, bool strict, int *status);
int32_t LARDER_ICU(ucol_countAvailable)(void);
const char *LARDER_ICU(ucol_getAvailable)(int32_t index);
void *LARDER_ICU(ucol_open)(const char *locale, int *status);
void LARDER_ICU(ucol_close)(void *collator);
int LARDER_ICU(ucol_strcollUTF8)(const void *collator, const char *a, int32_t aLength, const char *b, int32_t bLength,
    int *status);

/// Room for a locale ID, and for a language subtag (ICU's ULOC_FULLNAME_CAPACITY and ULOC_LANG_CAPACITY).
#define LARDER_ICU_LOCALE_CAPACITY 157
#define LARDER_ICU_LANGUAGE_CAPACITY 12

/// The canonical BCP 47 tag of `tag` (a client's `collation`) with collation strength `strength` (1 primary to 5
/// identical; 0 keeps the locale's own) written into `out` (NUL-terminated), or -1 when `tag` is not a well-formed
/// tag of a language ICU has data for.
static inline int larder_icu_canonical(const char *tag, int strength, char *out, int capacity) {
    char locale[LARDER_ICU_LOCALE_CAPACITY + 1];
    char language[LARDER_ICU_LANGUAGE_CAPACITY + 1];
    int32_t parsed = 0;
    int status = 0;
    int32_t length = LARDER_ICU(uloc_forLanguageTag)(tag, locale, LARDER_ICU_LOCALE_CAPACITY, &parsed, &status);
    if (status > 0 || status == -124 || length <= 0
        || parsed != (int32_t)strlen(tag)) return -1;
    status = 0;
    LARDER_ICU(uloc_getLanguage)(locale, language, LARDER_ICU_LANGUAGE_CAPACITY, &status);
    if (status > 0 || language[0] == 0) return -1;
    int known = strcmp(language, "und") == 0 || strcmp(language, "root") == 0;
    for (int32_t i = 0, n = LARDER_ICU(ucol_countAvailable)(); !known && i < n; i++) {
        char available[LARDER_ICU_LANGUAGE_CAPACITY + 1];
        int s = 0;
        LARDER_ICU(uloc_getLanguage)(LARDER_ICU(ucol_getAvailable)(i), available, LARDER_ICU_LANGUAGE_CAPACITY, &s);
        known = s <= 0 && strcmp(available, language) == 0;
    }
    if (!known) return -1;
    if (strength > 0) {
        static const char *levels[] = {"primary", "secondary", "tertiary", "quaternary", "identical"};
        status = 0;
        LARDER_ICU(uloc_setKeywordValue)("colstrength", levels[strength - 1], locale, LARDER_ICU_LOCALE_CAPACITY, &status);
        if (status > 0) return -1;
    }
    status = 0;
    length = LARDER_ICU(uloc_toLanguageTag)(locale, out, capacity - 1, 1, &status);
    if (status > 0 || length <= 0 || length >= capacity) return -1;
    out[length] = 0;
    return length;
}

/// A collator for the canonical tag `tag`; NULL when ICU has none.
static inline void *larder_icu_open(const char *tag) {
    char locale[LARDER_ICU_LOCALE_CAPACITY + 1];
    int32_t parsed = 0;
    int status = 0;
    LARDER_ICU(uloc_forLanguageTag)(tag, locale, LARDER_ICU_LOCALE_CAPACITY, &parsed, &status);
    if (status > 0) return NULL;
    status = 0;
    void *collator = LARDER_ICU(ucol_open)(locale, &status);
    if (status > 0) {
        if (collator) LARDER_ICU(ucol_close)(collator);
        return NULL;
    }
    return collator;
}

static inline void larder_icu_close(void *collator) { LARDER_ICU(ucol_close)(collator); }

/// The order of two UTF-8 strings under `collator`, then (for strings it finds equal) by their bytes, as
/// PostgreSQL's deterministic ICU collations order them: negative, zero (the same bytes) or positive.
static inline int larder_icu_compare(void *collator, const void *a, int aLength, const void *b, int bLength) {
    int status = 0;
    int result =
        LARDER_ICU(ucol_strcollUTF8)(collator, (const char *)a, aLength, (const char *)b, bLength, &status);
    if (status <= 0 && result != 0) return result < 0 ? -1 : 1;
    int common = aLength < bLength ? aLength : bLength;
    int bytes = common > 0 ? memcmp(a, b, (size_t)common) : 0;
    if (bytes != 0) return bytes;
    return aLength < bLength ? -1 : (aLength > bLength ? 1 : 0);
}
#endif
