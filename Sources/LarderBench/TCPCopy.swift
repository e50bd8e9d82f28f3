#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import LarderIO

/// A raw loopback sink for `larder-bench tcp-copy`: for every 4 bytes it reads, it writes `responseSize` bytes from
/// one preallocated buffer, with plain blocking `write` calls. It is the floor under any server that moves the same
/// bytes over the same loopback: what a 1 MiB BLOB_GET would cost with no protocol, no store, no copy.
public final class LoopbackSink: Sendable {
    public let port: Int
    let listener: Int32
    let responseSize: Int

    public init(responseSize: Int) throws(BenchError) {
        (listener, port) = try Sys.listenLoopback()
        self.responseSize = responseSize
        let listener = listener
        let size = responseSize
        let thread = Thread {
            while true {
                let fd = accept(listener, nil, nil)
                if fd < 0 {
                    if errno == EINTR || errno == ECONNABORTED { continue }
                    return  // closed by stop()
                }
                let worker = Thread { LoopbackSink.serve(fd, size) }
                worker.name = "tcp-copy sink"
                worker.start()
            }
        }
        thread.name = "tcp-copy accept"
        thread.start()
    }

    static func serve(_ fd: Int32, _ size: Int) {
        defer { close(fd) }
        var one: Int32 = 1
        _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        let payload = UnsafeMutableRawBufferPointer.allocate(byteCount: size, alignment: 16)
        defer { payload.deallocate() }
        payload.initializeMemory(as: UInt8.self, repeating: 0x5A)
        var request = [UInt8](repeating: 0, count: 4096)
        var pending = 0
        while true {
            let n = request.withUnsafeMutableBytes { read(fd, $0.baseAddress!, $0.count) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return }
            pending += n
            while pending >= 4 {
                pending -= 4
                do throws(BenchError) {
                    try Sys.writeAll(fd, UnsafeRawBufferPointer(payload))
                } catch {
                    return
                }
            }
        }
    }

    /// Stops accepting; connections end when their client closes.
    public func stop() {
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }
}

/// The options of `larder-bench tcp-copy`.
public struct TCPCopyOptions: Sendable, Equatable {
    public var size = 1 << 20
    public var connections = 1
    public var pipeline = 1
    public var duration = 5.0
    public var warmup = 0.0
    public var json = false
    public var quiet = false

    public init() {}

    public static let usageLine =
        "Usage: larder-bench tcp-copy [--size SIZE] [--connections N] [--pipeline N] [--duration S] [--warmup S] "
        + "[--json] [--quiet]"

    public static let helpText = """
        larder-bench tcp-copy: the raw loopback floor for blob transfers

        \(usageLine)

        An in-process sink on 127.0.0.1 answers each 4-byte request with --size bytes (default 1MiB; units KiB, MiB,
        GiB) from one buffer with plain write calls. The run engine drives it as it drives a server, so the figures compare directly with
        `larder-bench run --mix blob-get --blob-size SIZE` at the same concurrency. Defaults: 1 connection, 1 in
        flight, 5 s, no warmup.

        """

    /// Parses the options after `tcp-copy`; nil means help was asked for.
    public static func parse(_ arguments: [String]) throws(UsageError) -> TCPCopyOptions? {
        var o = TCPCopyOptions()
        var scanner = ArgumentScanner(arguments)
        while let argument = scanner.next() {
            let name = argument.name
            let inline = argument.inline
            func value() throws(UsageError) -> String {
                guard let value = scanner.value(for: argument) else { throw UsageError("\(name) needs a value") }
                return value
            }
            switch name {
            case "-h", "--help": return nil
            case "--size": o.size = try BenchArguments.size(name, try value(), 1...(256 << 20))
            case "--connections", "-c": o.connections = try BenchArguments.integer(name, try value(), 1...1000)
            case "--pipeline", "-P": o.pipeline = try BenchArguments.integer(name, try value(), 1...1024)
            case "--duration", "-d": o.duration = try BenchArguments.seconds(name, try value(), allowZero: false)
            case "--warmup": o.warmup = try BenchArguments.seconds(name, try value(), allowZero: true)
            case "--json", "--quiet", "-q":
                if inline != nil { throw UsageError("\(name) takes no value") }
                if name == "--json" { o.json = true } else { o.quiet = true }
            default:
                throw UsageError(name.hasPrefix("-") ? "unknown option '\(name)'" : "unexpected argument '\(name)'")
            }
        }
        return o
    }
}

/// `larder-bench tcp-copy`: the engine against a `LoopbackSink`, so that its figures compare directly with a
/// BLOB_GET run of the same size and concurrency.
public func runTCPCopy(
    _ copy: TCPCopyOptions, log: @escaping @Sendable (String) -> Void = { _ in }
) throws(BenchError) -> BenchResults {
    let sink = try LoopbackSink(responseSize: copy.size)
    defer { sink.stop() }
    var options = BenchOptions()
    options.target = .raw
    options.port = sink.port
    options.connections = copy.connections
    options.pipeline = copy.pipeline
    options.duration = copy.duration
    options.warmup = copy.warmup
    options.rawResponseSize = copy.size
    options.blobSize = copy.size
    options.mix = OperationMix([(.blobGet, 1)])
    options.quiet = copy.quiet
    options.json = copy.json
    return try runBenchmark(options, log: log)
}
