#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import LarderTestSupport

/// A program on a real pseudo-terminal of a chosen size, driven as a person drives it: keys in (text, escape sequences,
/// Tab, Ctrl-C), the terminal's output read back. The program is the session leader with the terminal as its
/// controlling terminal, so Ctrl-C reaches it as a shell's Ctrl-C would: the line discipline turns the key into
/// SIGINT, unless the program (a line editor) has made it a plain key.
///
/// Every wait is for something to appear, with a generous deadline; nothing sleeps and hopes.
final class PseudoTerminal: @unchecked Sendable {
    let pid: pid_t
    private let master: Int32
    /// The program's side of the terminal.
    let slavePath: String
    /// Everything the program wrote, and how much of it earlier `expect`s consumed.
    private var output: [UInt8] = []
    private var consumed = 0
    private var exitStatus: Int32?

    /// Keys as a terminal sends them.
    enum Key: String {
        case enter = "\r"
        case tab = "\t"
        case ctrlA = "\u{01}"
        case ctrlC = "\u{03}"
        case ctrlD = "\u{04}"
        case ctrlE = "\u{05}"
        case up = "\u{1B}[A"
        case down = "\u{1B}[B"
        case right = "\u{1B}[C"
        case left = "\u{1B}[D"
    }

    // glibc's posix_spawn flags (the Glibc module leaves them out): a new session, default actions and an empty mask
    // for the signals below (the test runner's threads may block or ignore them, and a child inherits both).
    private static let spawnSetSignalDefaults: Int16 = 0x04
    private static let spawnSetSignalMask: Int16 = 0x08
    private static let spawnSetSession: Int16 = 0x80
    // Linux's TIOCGPTN and TIOCSPTLCK (the pty's number, its unlock), which Swift cannot import from their macros.
    private static let getPtyNumber: UInt = 0x8004_5430
    private static let setPtyLock: UInt = 0x4004_5431

    /// Starts `executable` with `arguments` on a new terminal of `columns` x `rows`, with exactly `environment` (and
    /// TERM=xterm unless it names a TERM).
    init(_ executable: String, _ arguments: [String], columns: Int = 80, rows: Int = 24, environment: [String: String])
        throws
    {
        master = open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC)
        guard master >= 0 else { throw ServerTestError("cannot open /dev/ptmx: errno \(errno)") }
        var unlock: Int32 = 0
        var number: UInt32 = 0
        var size = winsize(ws_row: UInt16(rows), ws_col: UInt16(columns), ws_xpixel: 0, ws_ypixel: 0)
        guard ioctl(master, PseudoTerminal.setPtyLock, &unlock) == 0,
            ioctl(master, PseudoTerminal.getPtyNumber, &number) == 0,
            ioctl(master, UInt(TIOCSWINSZ), &size) == 0
        else {
            close(master)
            throw ServerTestError("cannot set up the pseudo-terminal: errno \(errno)")
        }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        posix_spawnattr_setflags(
            &attributes,
            PseudoTerminal.spawnSetSession | PseudoTerminal.spawnSetSignalMask | PseudoTerminal.spawnSetSignalDefaults)
        var none = sigset_t()
        sigemptyset(&none)
        posix_spawnattr_setsigmask(&attributes, &none)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for signal in [SIGINT, SIGTERM, SIGQUIT, SIGHUP, SIGPIPE] { sigaddset(&defaults, signal) }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        // Opened after setsid, the terminal becomes the child's controlling terminal.
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/pts/\(number)", O_RDWR, 0)
        posix_spawn_file_actions_adddup2(&actions, 0, 1)
        posix_spawn_file_actions_adddup2(&actions, 0, 2)
        var variables = environment
        if variables["TERM"] == nil { variables["TERM"] = "xterm" }
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp = variables.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            for pointer in argv + envp { free(pointer) }
        }
        var child: pid_t = 0
        let result = posix_spawn(&child, executable, &actions, &attributes, argv, envp)
        guard result == 0 else {
            close(master)
            throw ServerTestError("cannot start \(executable): error \(result)")
        }
        pid = child
        slavePath = "/dev/pts/\(number)"
    }

    deinit {
        if exitStatus == nil {
            kill(pid, SIGKILL)
            var status: Int32 = 0
            waitpid(pid, &status, 0)
        }
        close(master)
    }

    /// Types `text` (escape sequences and control characters included) as one burst of keys.
    func type(_ text: String) {
        let bytes = Array(text.utf8)
        var offset = 0
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeBytes { write(master, $0.baseAddress!, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { return }
            offset += n
        }
    }

    /// Presses one key.
    func press(_ key: Key) { type(key.rawValue) }

    /// Waits until the terminal is back in the mode a running command has (Ctrl-C a signal, lines echoed), which a
    /// line editor sets when it hands a line over: a Ctrl-C pressed after this interrupts the command, not the
    /// editor.
    func waitForCookedMode(seconds: Double = 120) throws {
        try waitForMode(cooked: true, seconds: seconds)
    }

    /// Waits until a line editor has the terminal (no line discipline: Ctrl-C is a key).
    func waitForEditingMode(seconds: Double = 120) throws {
        try waitForMode(cooked: false, seconds: seconds)
    }

    private func waitForMode(cooked: Bool, seconds: Double) throws {
        let deadline = Date().addingTimeInterval(seconds)
        while true {
            let fd = open(slavePath, O_RDWR | O_NOCTTY | O_CLOEXEC)
            var settings = termios()
            let got = fd >= 0 && tcgetattr(fd, &settings) == 0
            if fd >= 0 { close(fd) }
            let isCooked = settings.c_lflag & tcflag_t(ISIG) != 0 && settings.c_lflag & tcflag_t(ICANON) != 0
            let isEditing = settings.c_lflag & tcflag_t(ISIG) == 0 && settings.c_lflag & tcflag_t(ICANON) == 0
            if got && (cooked ? isCooked : isEditing) { return }
            guard Date() < deadline else {
                throw ServerTestError("the terminal did not reach \(cooked ? "cooked" : "editing") mode")
            }
            _ = readSome(timeoutMs: 10)
        }
    }

    /// Waits until `text` appears in what the terminal shows after the previous match (escape sequences and carriage
    /// returns left out), and returns that stretch of output up to and including it.
    @discardableResult
    func expect(_ text: String, seconds: Double = 120) throws -> String {
        let deadline = Date().addingTimeInterval(seconds)
        while true {
            let fresh = PseudoTerminal.plain(Array(output[consumed...]))
            if let range = fresh.range(of: text) {
                let matched = fresh[..<range.upperBound]
                consumed += PseudoTerminal.rawOffset(in: Array(output[consumed...]), plainLength: matched.utf8.count)
                return String(matched)
            }
            guard Date() < deadline else {
                let before = PseudoTerminal.plain(Array(output[..<consumed].suffix(400)))
                throw ServerTestError(
                    "the terminal did not show \(text.debugDescription); it showed:\n\(fresh)\n(before that: \(before))")
            }
            guard readSome(timeoutMs: 100) else {
                throw ServerTestError("the program ended before showing \(text.debugDescription); it showed:\n\(fresh)")
            }
        }
    }

    /// Everything shown since the previous match, without waiting.
    var pending: String {
        _ = readSome(timeoutMs: 0)
        return PseudoTerminal.plain(Array(output[consumed...]))
    }

    /// Waits for the program to exit (reading its output meanwhile, so it never blocks on a full terminal) and
    /// returns its exit status; a death by signal is 128 + the signal, as a shell reports it.
    func waitForExit(seconds: Double = 120) throws -> Int32 {
        if let exitStatus { return exitStatus }
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            var status: Int32 = 0
            let result = waitpid(pid, &status, WNOHANG)
            if result == pid {
                let signal = status & 0x7F
                exitStatus = signal == 0 ? (status >> 8) & 0xFF : 128 + signal
                while readSome(timeoutMs: 0) {}
                return exitStatus!
            }
            _ = readSome(timeoutMs: 20)
        }
        throw ServerTestError("the program did not exit; it showed:\n\(pending)")
    }

    /// Reads what is there (waiting up to `timeoutMs` for something); false once the program closed the terminal.
    private func readSome(timeoutMs: Int32) -> Bool {
        var descriptor = pollfd(fd: master, events: Int16(POLLIN), revents: 0)
        let ready = poll(&descriptor, 1, timeoutMs)
        guard ready > 0 else { return ready == 0 || errno == EINTR }
        var chunk = [UInt8](repeating: 0, count: 65536)
        let n = read(master, &chunk, chunk.count)
        // EIO: every descriptor of the terminal's other side is closed (the program ended).
        guard n > 0 else { return n < 0 && errno == EINTR }
        output += chunk[0..<n]
        return true
    }

    /// The text of terminal output: ANSI escape sequences and carriage returns removed.
    static func plain(_ bytes: [UInt8]) -> String {
        String(decoding: strip(bytes).plain, as: UTF8.self)
    }

    /// The raw length of `bytes` whose plain rendering is `plainLength` bytes long.
    static func rawOffset(in bytes: [UInt8], plainLength: Int) -> Int {
        let (plain, offsets) = strip(bytes)
        return plainLength >= plain.count ? bytes.count : offsets[plainLength]
    }

    /// Plain bytes, and for each the offset in `bytes` where it came from.
    private static func strip(_ bytes: [UInt8]) -> (plain: [UInt8], offsets: [Int]) {
        var plain: [UInt8] = []
        var offsets: [Int] = []
        var index = 0
        while index < bytes.count {
            let byte = bytes[index]
            if byte == 0x1B {
                index += 1
                if index < bytes.count && bytes[index] == UInt8(ascii: "[") {
                    // CSI: parameters and intermediates up to a final byte in 0x40...0x7E.
                    index += 1
                    while index < bytes.count && !(0x40...0x7E).contains(bytes[index]) { index += 1 }
                }
                index += 1
                continue
            }
            if byte != 0x0D && byte != 0x07 {
                plain.append(byte)
                offsets.append(index)
            }
            index += 1
        }
        return (plain, offsets)
    }
}
