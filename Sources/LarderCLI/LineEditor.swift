#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import CLibEdit
import Foundation

/// The prompt's line editor on a terminal: libedit's emacs key bindings (arrows, Ctrl-A, Ctrl-E, Ctrl-W, Ctrl-R ...),
/// ↑/↓ through a history kept in a file, Tab completion, and Ctrl-C as a key that drops the line being typed.
///
/// `read` blocks; the prompt calls it on a thread of its own, so a completion that asks the server (which needs the
/// cooperative pool) can wait for the answer.
final class LineEditor: @unchecked Sendable {
    /// What one `read` got.
    enum Input: Equatable {
        case line(String)
        /// Ctrl-C: the line was dropped.
        case interrupted
        /// Ctrl-D on an empty line, or the terminal went away.
        case end
    }

    /// What a completion offers for the word before the cursor.
    struct Offer {
        /// The word being completed, as typed.
        var word: String
        /// Every candidate that starts with `word`.
        var candidates: [String]
    }

    private let editor: OpaquePointer
    private let history: OpaquePointer
    private let historyPath: String
    private let complete: (String) -> Offer
    private var promptText: UnsafeMutablePointer<CChar>
    /// The names and help of the editor functions added below, which libedit keeps without copying: freed after it.
    private let functionTexts: [UnsafeMutablePointer<wchar_t>]
    private var interrupted = false

    /// Entries kept in the history file; it is trimmed to this when it grows to twice as many.
    static let historyLimit = 1000

    /// A line editor on stdin/stdout with the history in `historyPath`; `complete` gets the line up to the cursor.
    init(historyPath: String, complete: @escaping (String) -> Offer) {
        LineEditor.useUTF8()
        self.historyPath = historyPath
        self.complete = complete
        promptText = strdup("")
        functionTexts = ["larder-complete", "complete the word", "larder-interrupt", "drop the line"].map(LineEditor.wide)
        history = history_init()
        larder_history_set_size(history, Int32(LineEditor.historyLimit))
        larder_history_set_unique(history, 1)
        editor = larder_el_init("larder")
        larder_el_set_editor(editor, "emacs")
        larder_el_set_history(editor, history)
        // While a line is edited Ctrl-C is a key (it drops the line), not a signal that would end the process.
        larder_el_setty_edit(editor, "-isig")
        larder_el_set_client_data(editor, Unmanaged.passUnretained(self).toOpaque())
        larder_el_set_prompt(editor) { editor in
            guard let editor, let data = larder_el_client_data(editor) else { return nil }
            return Unmanaged<LineEditor>.fromOpaque(data).takeUnretainedValue().promptText
        }
        larder_el_add_function(editor, functionTexts[0], functionTexts[1]) { editor, _ in
            guard let editor, let data = larder_el_client_data(editor) else { return UInt8(CC_ERROR) }
            return Unmanaged<LineEditor>.fromOpaque(data).takeUnretainedValue().completeWord()
        }
        larder_el_add_function(editor, functionTexts[2], functionTexts[3]) { editor, _ in
            guard let editor, let data = larder_el_client_data(editor) else { return UInt8(CC_EOF) }
            return Unmanaged<LineEditor>.fromOpaque(data).takeUnretainedValue().interrupt()
        }
        larder_el_bind(editor, "^I", "larder-complete")
        larder_el_bind(editor, "^C", "larder-interrupt")
        for entry in LineEditor.loadHistory(historyPath) { larder_history_enter(history, entry) }
    }

    deinit {
        el_end(editor)
        history_end(history)
        free(promptText)
        for text in functionTexts { text.deallocate() }
    }

    /// `text` as a NUL-terminated wide string, for libedit's wide-character calls.
    private static func wide(_ text: String) -> UnsafeMutablePointer<wchar_t> {
        let scalars = Array(text.unicodeScalars)
        let pointer = UnsafeMutablePointer<wchar_t>.allocate(capacity: scalars.count + 1)
        for (index, scalar) in scalars.enumerated() { pointer[index] = wchar_t(bitPattern: scalar.value) }
        pointer[scalars.count] = 0
        return pointer
    }

    /// Reads one line after `prompt`.
    func read(prompt: String) -> Input {
        free(promptText)
        promptText = strdup(prompt)
        interrupted = false
        // The terminal may have been resized while the last command ran.
        el_resize(editor)
        // Editing mode before the prompt shows: keys typed as soon as it shows are read as keys (a Ctrl-C typed
        // before el_gets's first read would be a signal that also throws away what was typed before it).
        larder_el_prepare_terminal(editor, 1)
        var count: Int32 = 0
        guard let line = el_gets(editor, &count) else { return .end }
        if interrupted { return .interrupted }
        guard count > 0 else { return .end }
        var text = String(cString: line)
        if text.hasSuffix("\n") { text.removeLast() }
        return .line(text)
    }

    /// Adds an entry (a command, perhaps of several lines) to the history and to the end of its file.
    func remember(_ entry: String) {
        larder_history_enter(history, entry)
        LineEditor.append(entry, to: historyPath)
    }

    /// The history, oldest first, as `history` prints it.
    static func entries(_ path: String) -> [String] { loadHistory(path) }

    // MARK: - Keys

    /// Ctrl-C: show `^C` at the end of the line and end it as Enter would (libedit draws the line break); `read`
    /// then drops the line.
    private func interrupt() -> UInt8 {
        interrupted = true
        if let line = el_wline(editor) {
            el_cursor(editor, Int32(line.pointee.lastchar - line.pointee.cursor))
        }
        el_insertstr(editor, "^C")
        el_push(editor, "\n")
        return UInt8(CC_REFRESH)
    }

    /// Tab: one candidate is completed with a space after it; several are completed as far as they agree, and listed
    /// below the line when they agree no further; none rings the bell.
    private func completeWord() -> UInt8 {
        guard let info = el_line(editor) else { return UInt8(CC_ERROR) }
        let length = info.pointee.cursor - info.pointee.buffer
        let before = String(
            decoding: UnsafeRawBufferPointer(start: info.pointee.buffer, count: max(0, length)), as: UTF8.self)
        let offer = complete(before)
        guard !offer.candidates.isEmpty else { return UInt8(CC_REFRESH_BEEP) }
        if offer.candidates.count == 1 {
            el_insertstr(editor, String(offer.candidates[0].dropFirst(offer.word.count)) + " ")
            return UInt8(CC_REFRESH)
        }
        let common = LineEditor.commonPrefix(offer.candidates)
        if common.count > offer.word.count {
            el_insertstr(editor, String(common.dropFirst(offer.word.count)))
            return UInt8(CC_REFRESH)
        }
        let columns = Output.terminalColumns()
        let width = (offer.candidates.map { Output.width($0) }.max() ?? 0) + 2
        let perLine = max(1, columns / width)
        var text = "\n"
        for (n, candidate) in offer.candidates.enumerated() {
            text += n % perLine == perLine - 1 || n == offer.candidates.count - 1
                ? candidate + "\n" : Output.pad(candidate, width)
        }
        Output.writeAll(1, Array(text.utf8))
        return UInt8(CC_REDISPLAY)
    }

    static func commonPrefix(_ words: [String]) -> String {
        guard var prefix = words.first else { return "" }
        for word in words.dropFirst() {
            while !word.hasPrefix(prefix) { prefix.removeLast() }
        }
        return prefix
    }

    // MARK: - History file

    /// Entries one per line, a backslash and a line break written `\\` and `\n`, so a multi-line command stays one
    /// entry and the file reads as plain text.
    static func loadHistory(_ path: String) -> [String] {
        guard let data = FileManager.default.contents(atPath: path) else { return [] }
        return String(decoding: data, as: UTF8.self).split(separator: "\n").map { line in
            var entry = ""
            var escaped = false
            for character in line {
                if escaped {
                    entry.append(character == "n" ? "\n" : character)
                    escaped = false
                } else if character == "\\" {
                    escaped = true
                } else {
                    entry.append(character)
                }
            }
            return entry
        }
    }

    /// Appends one entry; past twice `historyLimit` entries, the file is rewritten with the newest `historyLimit`.
    static func append(_ entry: String, to path: String) {
        let line = entry.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\n", with: "\\n") + "\n"
        let fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0o600)
        guard fd >= 0 else { return }
        Output.writeAll(fd, Array(line.utf8))
        close(fd)
        // Counting line breaks is enough to know; the entries are read only to trim.
        guard let data = FileManager.default.contents(atPath: path),
            data.reduce(0, { $1 == 0x0A ? $0 + 1 : $0 }) > 2 * historyLimit
        else { return }
        let entries = loadHistory(path)
        let kept = entries.suffix(historyLimit).map {
            $0.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\n", with: "\\n") + "\n"
        }
        let temporary = path + ".\(getpid())"
        guard FileManager.default.createFile(
            atPath: temporary, contents: Data(kept.joined().utf8), attributes: [.posixPermissions: 0o600])
        else { return }
        rename(temporary, path)
    }

    /// libedit reads and shows characters in the locale's encoding: UTF-8, even when the environment names none.
    private static func useUTF8() {
        setlocale(LC_CTYPE, "")
        if String(cString: nl_langinfo(nl_item(CODESET))) != "UTF-8" {
            if setlocale(LC_CTYPE, "C.UTF-8") == nil { setlocale(LC_CTYPE, "en_US.UTF-8") }
        }
    }
}
