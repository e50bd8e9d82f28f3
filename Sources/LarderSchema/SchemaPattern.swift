import CPCRE2

/// A `pattern`, compiled once with PCRE2 (JIT-compiled where the platform has it) and matched under a step limit.
///
/// The regular expression is unanchored, as JSON Schema's are, and read with `PCRE2_UTF | PCRE2_UCP` (code points,
/// Unicode classes), `PCRE2_DOLLAR_ENDONLY` (`$` is the end, not a final newline, as in ECMA-262) and
/// ECMA-262's `\u` escapes (`\uFFFF`, `\u{1F600}`). `\C` (one byte, which could split a character) is refused.
///
/// Compiled code and the match context are only read once made, which PCRE2 allows from any number of threads at
/// once; each match brings its own match data (`SchemaPattern.MatchData`). Hence `@unchecked Sendable`.
final class SchemaPattern: @unchecked Sendable {
    /// The pattern as the schema wrote it.
    let source: String
    /// The compiled pattern.
    private let code: OpaquePointer
    /// The match context: the limits.
    private let context: OpaquePointer

    /// The most memory (KiB) one match's backtracking may use (PCRE2's heap limit; the interpreter's).
    static let heapLimitKiB: UInt32 = 16 << 10

    /// The outcome of one match.
    enum Outcome {
        /// The pattern occurs in the string, or not.
        case match, noMatch
        /// A limit stopped the match before it knew.
        case gaveUp
    }

    /// Compiles `source`, whose matches take at most `matchSteps` backtracking steps (PCRE2's match limit) before
    /// they give up: a catastrophic pattern on a long string ends as a violation after a few milliseconds instead of
    /// running for ages. Throws PCRE2's message and the offset of the error in the pattern.
    init(_ source: String, matchSteps: Int) throws(PatternError) {
        let matchLimit = UInt32(clamping: matchSteps)
        self.source = source
        var errorCode: Int32 = 0
        var errorOffset = 0
        guard let compileContext = pcre2_compile_context_create_8(nil) else { throw PatternError("out of memory", 0) }
        defer { pcre2_compile_context_free_8(compileContext) }
        pcre2_set_compile_extra_options_8(compileContext, UInt32(PCRE2_EXTRA_ALT_BSUX))
        let options = UInt32(PCRE2_UTF | PCRE2_UCP | PCRE2_ALT_BSUX | PCRE2_DOLLAR_ENDONLY | PCRE2_NEVER_BACKSLASH_C)
        let compiled = source.utf8.withContiguousStorageIfAvailable { utf8 in
            pcre2_compile_8(utf8.baseAddress, utf8.count, options, &errorCode, &errorOffset, compileContext)
        } ?? Array(source.utf8).withUnsafeBufferPointer { utf8 in
            pcre2_compile_8(utf8.baseAddress, utf8.count, options, &errorCode, &errorOffset, compileContext)
        }
        guard let compiled else { throw PatternError(Self.message(errorCode), errorOffset) }
        guard let matchContext = pcre2_match_context_create_8(nil) else {
            pcre2_code_free_8(compiled)
            throw PatternError("out of memory", 0)
        }
        pcre2_set_match_limit_8(matchContext, matchLimit)
        pcre2_set_depth_limit_8(matchContext, matchLimit)
        pcre2_set_heap_limit_8(matchContext, Self.heapLimitKiB)
        // Without JIT support (or memory for it) the interpreter matches instead, under the same limits.
        _ = pcre2_jit_compile_8(compiled, UInt32(PCRE2_JIT_COMPLETE))
        code = compiled
        context = matchContext
    }

    deinit {
        pcre2_match_context_free_8(context)
        pcre2_code_free_8(code)
    }

    /// Whether the pattern occurs in the UTF-8 `subject`, with `data` for PCRE2's results.
    func match(_ subject: UnsafeBufferPointer<UInt8>, _ data: MatchData) -> Outcome {
        withUnsafePointer(to: 0 as UInt8) { empty in
            let start = subject.baseAddress ?? empty
            var rc = pcre2_match_8(code, start, subject.count, 0, 0, data.pointer, context)
            // The JIT's stack is fixed; the interpreter's backtracking lives on the heap, under `heapLimitKiB`.
            if rc == PCRE2_ERROR_JIT_STACKLIMIT {
                rc = pcre2_match_8(code, start, subject.count, 0, UInt32(PCRE2_NO_JIT), data.pointer, context)
            }
            if rc >= 0 { return .match }
            return rc == PCRE2_ERROR_NOMATCH ? .noMatch : .gaveUp
        }
    }

    /// PCRE2's text for an error code.
    private static func message(_ code: Int32) -> String {
        var buffer = [UInt8](repeating: 0, count: 256)
        let count = pcre2_get_error_message_8(code, &buffer, buffer.count)
        return count > 0 ? String(decoding: buffer[..<Int(count)], as: UTF8.self) : "error \(code)"
    }

    /// The results of matches, owned by one validation at a time (PCRE2 match data must not be shared by threads).
    final class MatchData {
        /// PCRE2's match data, room for the whole match's offsets only.
        let pointer: OpaquePointer

        /// Fresh match data; nil when out of memory.
        init?() {
            guard let pointer = pcre2_match_data_create_8(1, nil) else { return nil }
            self.pointer = pointer
        }

        deinit { pcre2_match_data_free_8(pointer) }
    }
}

/// Why a `pattern` did not compile: PCRE2's message and the byte offset in the pattern.
struct PatternError: Error {
    /// PCRE2's message.
    let message: String
    /// Where in the pattern (bytes) the error is.
    let offset: Int

    /// An error with PCRE2's `message` at `offset`.
    init(_ message: String, _ offset: Int) {
        self.message = message
        self.offset = offset
    }
}
