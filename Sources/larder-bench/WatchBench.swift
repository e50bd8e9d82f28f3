#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Dispatch
import Foundation
import LarderIO
import LarderWire

/// `larder-bench watch`: change-feed fan-out against a running server. One writer creates documents; N subscribers
/// (raw sockets, a few polling threads) each WATCH the collection. Reports the events delivered per second and two
/// latencies per event: write-to-delivery (from the writer sending the CREATE, bench clock, microseconds) and
/// commit-to-delivery (from the event's `time`, the server's wall clock, milliseconds).
enum WatchBench {
    struct Options: SubcommandOptions {
        var host = "127.0.0.1"
        var port = 7411
        var subscribers = 1000
        var writes = 2000
        var window = 16
        var padBytes = 100
        var threads = 2
        var collection = "watchbench"
        var idsOnly = false
        /// Where the writer sends its CREATEs: another server than the subscribers' measures delivery across servers
        /// sharing one PostgreSQL. Default: the first of `--host`.
        var writer: (host: String, port: Int)?

        /// The subscribers' servers (`--host a:7411,b:7412`), round robin.
        var servers: [(host: String, port: Int)] {
            (try? HostList.parse(host, defaultPort: port)) ?? [(host, port)]
        }

        static let usage = "Usage: larder-bench watch [--host H[,H...]] [--port N] [--writer H:P] [--subscribers N] "
            + "[--writes N] [--window N] [--pad SIZE] [--threads N] [--collection C] [--ids-only]"

        static let help = """
            larder-bench watch: change-feed fan-out against a running larder-server

            \(usage)

            N subscribers (default 1000) each WATCH one collection over their own connection; one writer then creates
            --writes documents (default 2000), --window requests in flight (default 16), each with --pad bytes of
            padding (default 100). Subscribers are raw sockets served by --threads polling threads (default 2).
            Reports events delivered per second, write-to-delivery and commit-to-delivery latency, and gaps.
            Several servers on one PostgreSQL: --host a:7411,b:7412 spreads the subscribers over them, and
            --writer c:7413 writes through another, for delivery across servers.
            The server needs --max-connections above N (and the bench an open-file limit to match).

            """

        /// Takes `argument` if it is one of this subcommand's own options, reading its value from `scanner`.
        mutating func take(
            _ argument: ArgumentScanner.Argument, from scanner: inout ArgumentScanner
        ) throws(BenchUsage) -> Bool {
            switch argument.name {
            case "--host":
                self.host = try scanner.string(argument)
                do throws(LarderError) {
                    _ = try HostList.parse(self.host, defaultPort: self.port)
                } catch {
                    throw BenchUsage("--host: \(error.message)")
                }
            case "--writer":
                let text = try scanner.string(argument)
                do throws(LarderError) {
                    let parsed = try HostList.parse(text, defaultPort: 7411)
                    guard parsed.count == 1 else { throw LarderError(.invalidArgument, "one server") }
                    self.writer = parsed[0]
                } catch {
                    throw BenchUsage("--writer takes one host:port: \(error.message)")
                }
            case "--port": self.port = try scanner.int(argument)
            case "--subscribers": self.subscribers = try scanner.int(argument)
            case "--writes": self.writes = try scanner.int(argument)
            case "--window": self.window = try scanner.int(argument)
            case "--pad":
                let text = try scanner.string(argument)
                guard let bytes = ByteSize.parse(text) else {
                    throw BenchUsage("--pad needs a size: \(ByteSize.grammar), not '\(text)'")
                }
                self.padBytes = bytes
            case "--threads": self.threads = try scanner.int(argument)
            case "--collection": self.collection = try scanner.string(argument)
            case "--ids-only":
                try scanner.flag(argument)
                self.idsOnly = true
            default: return false
            }
            return true
        }
    }

    struct Failure: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }

    /// Microseconds on the monotonic clock (write-to-delivery).
    static func monotonicMicros() -> Int64 { Int64(DispatchTime.now().uptimeNanoseconds / 1000) }

    /// Milliseconds on the wall clock (commit-to-delivery: the server stamps `time` with its wall clock).
    static func wallMillis() -> Int64 {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        return Int64(spec.tv_sec) * 1000 + Int64(spec.tv_nsec) / 1_000_000
    }

    // MARK: A blocking connection for setup and the writer

    final class Link {
        let fd: Int32
        var decoder = FrameDecoder(maxFrameBytes: 1 << 30, maxJSONBytes: 1 << 30, maxBinaryBytes: 1 << 30)
        var buffer = ByteBuffer()
        let encoder = FrameEncoder()

        init(host: String, port: Int) throws(Failure) {
            fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = in_port_t(UInt16(port).bigEndian)
            address.sin_addr.s_addr = inet_addr(host)
            let rc = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
            guard fd >= 0, rc == 0 else { throw Failure("cannot connect to \(host):\(port) (errno \(errno))") }
            var one: Int32 = 1
            setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        }

        func send(_ opcode: Opcode, _ json: JSONObject, id: UInt32) throws(Failure) {
            let bytes = encoder.encode(Frame(opcode: opcode, requestID: id, json: json.bytes))
            var offset = 0
            while offset < bytes.count {
                let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + offset, $0.count - offset) }
                if n < 0 && errno == EINTR { continue }
                guard n > 0 else { throw Failure("write failed (errno \(errno))") }
                offset += n
            }
        }

        /// The next frame (blocking).
        func receive() throws(Failure) -> Frame {
            var chunk = [UInt8](repeating: 0, count: 64 << 10)
            while true {
                do {
                    if let frame = try decoder.next(&buffer) { return frame }
                } catch {
                    throw Failure("undecodable frame: \(error.error.message)")
                }
                let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                if n < 0 && errno == EINTR { continue }
                guard n > 0 else { throw Failure("the server closed the connection") }
                buffer.append(chunk[0..<n])
            }
        }

        func call(_ opcode: Opcode, _ json: JSONObject, id: UInt32) throws(Failure) -> Frame {
            try send(opcode, json, id: id)
            let frame = try receive()
            guard frame.status == .ok else {
                throw Failure("\(opcode.name) failed: \(String(decoding: frame.json, as: UTF8.self))")
            }
            return frame
        }
    }

    // MARK: Subscribers

    /// What one polling thread measured.
    final class Tally: @unchecked Sendable {
        var events = 0
        var gaps = 0
        var writeToDelivery: [Int32] = []  // microseconds
        var commitToDelivery: [Int32] = []  // milliseconds
        var lastArrival: Int64 = 0
    }

    /// A subscriber connection served by a polling thread.
    final class Subscriber {
        let fd: Int32
        var decoder = FrameDecoder(maxFrameBytes: 1 << 30, maxJSONBytes: 1 << 30, maxBinaryBytes: 1 << 30)
        var buffer = ByteBuffer()
        var received = 0
        init(fd: Int32) { self.fd = fd }
    }

    /// Reads events until every subscriber has `expected` of them (or a gap ended it), or `deadline` passes.
    static func serve(_ subscribers: [Int32], expected: Int, tally: Tally, deadline: UInt64) {
        let connections = subscribers.map { Subscriber(fd: $0) }
        var pollfds = subscribers.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
        var done = 0
        var chunk = [UInt8](repeating: 0, count: 256 << 10)
        tally.writeToDelivery.reserveCapacity(subscribers.count * expected)
        tally.commitToDelivery.reserveCapacity(subscribers.count * expected)
        let sentAtKey = Array(#""sentAt":"#.utf8)
        let timeKey = Array(#""time":""#.utf8)
        let gapKey = Array(#""kind":"gap""#.utf8)
        while done < connections.count && DispatchTime.now().uptimeNanoseconds < deadline {
            guard poll(&pollfds, nfds_t(pollfds.count), 100) > 0 else { continue }
            for index in pollfds.indices where pollfds[index].revents != 0 {
                pollfds[index].revents = 0
                let n = chunk.withUnsafeMutableBytes { read(connections[index].fd, $0.baseAddress, $0.count) }
                guard n > 0 else {
                    if n == 0 {
                        pollfds[index].fd = -1
                        done += 1
                    }
                    continue
                }
                let arrivedMicros = monotonicMicros()
                let arrivedMillis = wallMillis()
                let connection = connections[index]
                connection.buffer.append(chunk[0..<n])
                while let frame = try? connection.decoder.next(&connection.buffer) {
                    guard frame.opcode == .event else { continue }
                    if find(gapKey, in: frame.json) != nil {
                        tally.gaps += 1
                        pollfds[index].fd = -1
                        done += 1
                        break
                    }
                    tally.events += 1
                    connection.received += 1
                    if let sentAt = integer(after: sentAtKey, in: frame.json) {
                        tally.writeToDelivery.append(Int32(clamping: arrivedMicros - sentAt))
                    }
                    if let at = find(timeKey, in: frame.json), at + timeKey.count + 24 <= frame.json.count {
                        let text = String(decoding: frame.json[(at + timeKey.count)..<(at + timeKey.count + 24)], as: UTF8.self)
                        if let committed = Timestamp.parse(text) {
                            tally.commitToDelivery.append(Int32(clamping: arrivedMillis - committed))
                        }
                    }
                    if connection.received == expected {
                        pollfds[index].fd = -1
                        done += 1
                        tally.lastArrival = max(tally.lastArrival, arrivedMicros)
                    }
                }
            }
        }
    }

    static func find(_ needle: [UInt8], in haystack: [UInt8]) -> Int? {
        guard needle.count <= haystack.count else { return nil }
        var i = 0
        while i + needle.count <= haystack.count {
            if haystack[i] == needle[0] && haystack[i..<(i + needle.count)].elementsEqual(needle) { return i }
            i += 1
        }
        return nil
    }

    static func integer(after key: [UInt8], in bytes: [UInt8]) -> Int64? {
        guard var i = find(key, in: bytes).map({ $0 + key.count }) else { return nil }
        var value: Int64 = 0
        var digits = 0
        while i < bytes.count, bytes[i] >= 0x30, bytes[i] <= 0x39 {
            value = value * 10 + Int64(bytes[i] - 0x30)
            digits += 1
            i += 1
        }
        return digits > 0 ? value : nil
    }

    // MARK: The run

    static func run(_ o: Options) throws(Failure) {
        print("watch fan-out: \(o.subscribers) subscribers, \(o.writes) writes (window \(o.window), pad \(o.padBytes) B)"
            + "\(o.idsOnly ? ", ids only" : ""), \(o.threads) polling threads, "
            + "subscribers on \(o.servers.map { "\($0.host):\($0.port)" }.joined(separator: ",")), writer on "
            + "\((o.writer ?? o.servers[0]).host):\((o.writer ?? o.servers[0]).port)")
        let hello = HelloRequest(compression: [], client: "larder-bench watch").json
        var fds: [Int32] = []
        let setupStarted = monotonicMicros()
        for n in 0..<o.subscribers {
            let server = o.servers[n % o.servers.count]
            let link = try Link(host: server.host, port: server.port)
            _ = try link.call(.hello, hello, id: 1)
            let watch = WatchRequest(collection: o.collection, idsOnly: o.idsOnly)
            _ = try link.call(.watch, watch.json, id: 2)
            guard link.buffer.readableCount == 0 else { throw Failure("subscriber \(n) got an event before writing") }
            fds.append(link.fd)
        }
        print(String(format: "subscribed in %.2f s", Double(monotonicMicros() - setupStarted) / 1e6))

        let threads = max(1, min(o.threads, fds.count))
        let tallies = (0..<threads).map { _ in Tally() }
        let group = DispatchGroup()
        let deadline = DispatchTime.now().uptimeNanoseconds + 300 * 1_000_000_000
        for t in 0..<threads {
            let share = stride(from: t, to: fds.count, by: threads).map { fds[$0] }
            let tally = tallies[t]
            let expected = o.writes
            group.enter()
            Thread.detachNewThread {
                serve(share, expected: expected, tally: tally, deadline: deadline)
                group.leave()
            }
        }

        // The writer: CREATEs pipelined within the window, each stamped with its send time.
        let writerServer = o.writer ?? o.servers[0]
        let writer = try Link(host: writerServer.host, port: writerServer.port)
        _ = try writer.call(.hello, hello, id: 1)
        let pad = String(repeating: "p", count: o.padBytes)
        let started = monotonicMicros()
        var sent = 0
        var acked = 0
        while acked < o.writes {
            while sent < o.writes && sent - acked < o.window {
                let data: JSONObject = ["n": .int(Int64(sent)), "sentAt": .int(monotonicMicros()), "pad": .string(pad)]
                try writer.send(.create, ["collection": .string(o.collection), "data": .object(data)], id: UInt32(sent + 10))
                sent += 1
            }
            let reply = try writer.receive()
            guard reply.status == .ok else { throw Failure("CREATE failed: \(String(decoding: reply.json, as: UTF8.self))") }
            acked += 1
        }
        let writesDone = monotonicMicros()
        group.wait()
        for fd in fds { close(fd) }
        close(writer.fd)

        let events = tallies.reduce(0) { $0 + $1.events }
        let gaps = tallies.reduce(0) { $0 + $1.gaps }
        let last = tallies.map(\.lastArrival).max() ?? writesDone
        let seconds = Double(max(last, writesDone) - started) / 1e6
        let writeSeconds = Double(writesDone - started) / 1e6
        print(String(format: "writes: %d in %.2f s (%.0f/s)", o.writes, writeSeconds, Double(o.writes) / writeSeconds))
        print(String(format: "events delivered: %d of %d in %.2f s: %.0f events/s", events, o.writes * o.subscribers,
            seconds, Double(events) / seconds))
        print("gaps: \(gaps)")
        func report(_ name: String, _ unit: String, _ samples: [Int32]) {
            guard !samples.isEmpty else { return print("\(name): no samples") }
            let sorted = samples.sorted()
            func p(_ q: Double) -> Int32 { sorted[min(sorted.count - 1, Int(Double(sorted.count) * q))] }
            print("\(name) (\(unit)): p50 \(p(0.5))  p90 \(p(0.9))  p99 \(p(0.99))  max \(sorted.last!)  (\(sorted.count) events)")
        }
        report("write-to-delivery", "µs", tallies.flatMap(\.writeToDelivery))
        report("commit-to-delivery", "ms", tallies.flatMap(\.commitToDelivery))
    }
}
