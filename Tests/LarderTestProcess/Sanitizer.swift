import Foundation

/// The sanitizer the test processes are built with. `scripts/sanitize` builds the runner and every process it starts
/// (servers, the CLI) with the same one and exports its options, which is how a test tells.
public enum SanitizerBuild: Sendable {
    case none
    case address
    case thread

    /// This run's build, from the options `scripts/sanitize` exports (`ASAN_OPTIONS` or `TSAN_OPTIONS`).
    public static let current: SanitizerBuild = {
        let environment = ProcessInfo.processInfo.environment
        if environment["TSAN_OPTIONS"] != nil { return .thread }
        if environment["ASAN_OPTIONS"] != nil { return .address }
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
