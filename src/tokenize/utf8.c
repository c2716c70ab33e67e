/* UTF-8 validation and coding, and GPT-2's byte-to-unicode mapping used by byte-level BPE. */
#include "tokenize/tokenizer_internal.h"

size_t kite_utf8_validate(const char *str, size_t len) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < len) {
        unsigned char c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t n;
        uint32_t cp, min;
        if (c >= 0xC2 && c <= 0xDF) { n = 2; cp = c & 0x1F; min = 0x80; }
        else if (c >= 0xE0 && c <= 0xEF) { n = 3; cp = c & 0x0F; min = 0x800; }
        else if (c >= 0xF0 && c <= 0xF4) { n = 4; cp = c & 0x07; min = 0x10000; }
        else return i; /* continuation byte, overlong 2-byte lead (C0, C1) or F5..FF */
        if (len - i < n) return i;
        for (size_t k = 1; k < n; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return i;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
        i += n;
    }
    return len;
}

uint32_t kite_utf8_decode(const char *str, size_t n, size_t *adv) {
    const unsigned char *s = (const unsigned char *)str;
    size_t len = kite_utf8_len(s[0]);
    if (len > n) len = n;
    if (len == 1) {
        *adv = 1;
        return s[0];
    }
    uint32_t cp = s[0] & (0x7F >> len);
    for (size_t k = 1; k < len; k++) cp = (cp << 6) | (s[k] & 0x3F);
    *adv = len;
    return cp;
}

size_t kite_utf8_encode(uint32_t cp, char *out) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* GPT-2 keeps the printable bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF as themselves and maps the other 68
 * bytes, in byte order, to U+0100, U+0101, ... so that every byte has a visible character. */
static bool bytelevel_is_kept(uint32_t b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t kite_bytelevel_cp(uint8_t b) {
    if (bytelevel_is_kept(b)) return b;
    uint32_t n = 0; /* how many non-kept bytes come before b */
    for (uint32_t k = 0; k < b; k++) n += !bytelevel_is_kept(k);
    return 0x100 + n;
}

int kite_bytelevel_byte(uint32_t cp) {
    if (cp < 0x100) return bytelevel_is_kept(cp) ? (int)cp : -1;
    if (cp >= 0x100 + 68) return -1;
    uint32_t n = cp - 0x100;
    for (uint32_t b = 0; b < 256; b++) {
        if (bytelevel_is_kept(b)) continue;
        if (n == 0) return (int)b;
        n--;
    }
    return -1;
}
