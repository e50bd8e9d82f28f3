import Foundation

/// The sanitizer the test processes are built with. `scripts/sanitize` builds the runner and every process it starts
/// (servers, the CLI) with the same one, so the runner's own build tells.
public enum SanitizerBuild: Sendable {
    case none
    case address
    case thread

    /// This run's build: the sanitizer whose runtime is linked into this process (its initialiser is a symbol only a
    /// sanitized build has; the options in the environment would not tell, as `scripts/sanitize` exports both kinds').
    public static let current: SanitizerBuild = {
        let process = dlopen(nil, RTLD_NOW)
        defer { if let process { dlclose(process) } }
        if dlsym(process, "__tsan_init") != nil { return .thread }
        if dlsym(process, "__asan_init") != nil { return .address }
        return .none
    }()

    /// How many times more resident memory a process's own allocations take under this build. ThreadSanitizer keeps
    /// shadow cells beside every word the process touches (its documentation gives 5-10x for whole programs; an
    /// unfinished TLS handshake measured 90 KB under it against 16 KB without); AddressSanitizer keeps a shadow byte per
    /// eight and red zones around each allocation.
    public var memoryFactor: Int {
        switch self {
        case .none: 1
        case .address: 4
        case .thread: 8
        }
    }

    /// How many times longer to allow a deadline that a test sets on the server itself (an option such as
    /// `--postgres-timeout-ms`), where a plain build's margin is not enough: instrumented code runs about 2x slower
    /// under AddressSanitizer and 5-15x under ThreadSanitizer, and the sanitized suite loads the machine more.
    public var timeFactor: Int {
        switch self {
        case .none: 1
        case .address: 5
        case .thread: 10
        }
    }

    /// What AddressSanitizer keeps of freed memory before reusing it (its `quarantine_size_mb`, 256 MiB unless the
    /// options say otherwise): a process that streams far more than that through short-lived buffers holds this much
    /// more at its peak. Zero under the other builds.
    public var quarantineBytes: Int {
        guard self == .address else { return 0 }
        let options = ProcessInfo.processInfo.environment["ASAN_OPTIONS"] ?? ""
        let setting = options.split(separator: ":").first { $0.hasPrefix("quarantine_size_mb=") }
        let megabytes = setting.flatMap { Int($0.dropFirst("quarantine_size_mb=".count)) } ?? 256
        return megabytes << 20
    }

    /// A bound on the growth of a process's resident memory, `bytes` in a plain build, as it is under this build: what
    /// the process allocates costs `memoryFactor` times more, plus AddressSanitizer's quarantine.
    public func residentBound(_ bytes: Int) -> Int { bytes * memoryFactor + quarantineBytes }
}
