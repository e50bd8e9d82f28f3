#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Dispatch
import Foundation
import LarderBench
import LarderClient
import LarderIO
import LarderWire

/// `larder-bench blobs`: blob transfer speed through LarderClient over one open connection, so that even a 1 MiB
/// figure measures the transfer (BLOB_UPLOAD chunks up, ranged BLOB_GET down, each with its SHA-256), not a process
/// start and a handshake. Compare with `larder-bench tcp-copy --size` of the same size, run in the same minute.
enum BlobBench {
    struct Options: SubcommandOptions {
        var host = "127.0.0.1"
        var port = 7411
        var size = 1 << 20
        var rounds = 10
        var serverPID: Int32?
        var window = LarderClient.downloadWindow
        var rangeBytes: Int?

        static let usage =
            "Usage: larder-bench blobs [--host H] [--port N] [--size SIZE] [--rounds N] [--server-pid PID] "
            + "[--window N] [--range SIZE]"

        static let help = """
            larder-bench blobs: blob upload and download speed through LarderClient, one open connection

            \(usage)

            Makes a JPEG of --size bytes (default 1MiB), then --rounds times (default 10): putBlob(contentsOf:) (the
            file streamed in chunks, its SHA-256 checked by the server), writeBlob(to:) (read back by ranges, its
            SHA-256 checked), a byte-exact comparison, and BLOB_DELETE. Reports the median and best MB/s each way.
            With --server-pid, also the server's CPU time per MiB each way (from /proc: Linux only).

            Beside them, in the same rounds, the floors a download is measured against: the same ranges read into
            memory (no file, no hash: download_memory), the same bytes written to a new file beside the copy and
            fdatasync'ed (disk_floor: what any durable download pays at least), and SHA-256 over them in this
            process (sha256, libcrypto: what the client's check costs).

            --window N      ranges in flight per download (default \(LarderClient.downloadWindow))
            --range SIZE    bytes per range (default: the server's blobChunkBytes; at most what a frame carries)

            """

        /// Takes `argument` if it is one of this subcommand's own options, reading its value from `scanner`.
        mutating func take(
            _ argument: ArgumentScanner.Argument, from scanner: inout ArgumentScanner
        ) throws(BenchUsage) -> Bool {
            /// A size of at least 1 KiB, as `--size` and `--range` take it.
            func size(_ argument: ArgumentScanner.Argument, example: String) throws(BenchUsage) -> Int {
                let text = try scanner.string(argument)
                guard let size = ByteSize.parse(text), size >= 1024 else {
                    throw BenchUsage("\(argument.name) must be a size of at least 1KiB (e.g. \(example)), not '\(text)'")
                }
                return size
            }
            switch argument.name {
            case "--host": self.host = try scanner.string(argument)
            case "--port": self.port = try scanner.int(argument)
            case "--rounds": self.rounds = try scanner.int(argument)
            case "--server-pid": self.serverPID = Int32(try scanner.int(argument))
            case "--window": self.window = try scanner.int(argument)
            case "--range": self.rangeBytes = try size(argument, example: "4MiB")
            case "--size": self.size = try size(argument, example: "1MiB, 100MiB")
            default: return false
            }
            return true
        }
    }

    /// A JPEG the server accepts: SOI, a frame header, comment segments of pseudo-random filler, EOI.
    static func photo(size: Int) -> [UInt8] {
        var out: [UInt8] = [0xFF, 0xD8, 0xFF, 0xC0, 0x00, 0x0B, 0x08, 0x00, 0x01, 0x00, 0x01, 0x01, 0x01, 0x11, 0x00]
        out.reserveCapacity(size)
        var random = SplitMix64(seed: 42)
        while out.count < size - 2 {
            let room = size - 2 - out.count
            guard room >= 4 else {
                out += [UInt8](repeating: 0xFF, count: room)
                break
            }
            let length = min(room - 2, 65535)
            out += [0xFF, 0xFE, UInt8(length >> 8), UInt8(length & 0xFF)]
            for _ in 0..<(length - 2) { out.append(UInt8(truncatingIfNeeded: random.next())) }
        }
        out += [0xFF, 0xD9]
        return out
    }

    static func run(_ options: Options) throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("larder-bench-blobs-\(getpid())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let source = directory.appendingPathComponent("photo.jpg")
        let copy = directory.appendingPathComponent("copy.jpg")
        let floor = directory.appendingPathComponent("floor.jpg")
        let bytes = photo(size: options.size)
        try Data(bytes).write(to: source)
        let client = LarderClient(host: options.host, port: options.port)
        struct Round: Sendable {
            var up: Double
            var down: Double
            var memory: Double
            var disk: Double
            var sha256: Double
            var upCPU: Double?
            var downCPU: Double?
            /// This process's CPU (every thread) during writeBlob: the client's side of the download.
            var clientDownCPU: Double?
        }
        let pid = options.serverPID
        let rounds = try waitForTask { () async throws -> [Round] in
            let limits = try await client.serverHello().limits
            let rangeBytes = max(1, min(options.rangeBytes ?? limits.blobChunkBytes, limits.maxBinaryPartBytes))
            var rounds: [Round] = []
            for _ in 0..<options.rounds {
                let c0 = pid.flatMap(processCPUSeconds)
                let t0 = ContinuousClock.now
                let info = try await client.putBlob(contentsOf: source)
                let t1 = ContinuousClock.now
                let c1 = pid.flatMap(processCPUSeconds)
                let own1 = processCPUSeconds(getpid())
                try await client.writeBlob(
                    info.id, to: copy, window: options.window, rangeBytes: options.rangeBytes)
                let t2 = ContinuousClock.now
                let c2 = pid.flatMap(processCPUSeconds)
                let own2 = processCPUSeconds(getpid())
                let received = try await downloadToMemory(
                    client, info.id, size: options.size, window: options.window, rangeBytes: rangeBytes)
                let t3 = ContinuousClock.now
                guard received == options.size, try Data(contentsOf: copy) == Data(bytes) else {
                    throw LarderError(.internal, "the blob read back differs from the one sent")
                }
                try await client.blobDelete(info.id)
                let disk = try writeDurably(bytes, to: floor)
                let t4 = ContinuousClock.now
                var hasher = SHA256()
                bytes.withUnsafeBytes { hasher.update($0) }
                _ = hasher.finalize()
                let sha256 = seconds(ContinuousClock.now - t4)
                var cpu: (Double?, Double?) = (nil, nil)
                if let c0, let c1, let c2 { cpu = (c1 - c0, c2 - c1) }
                rounds.append(
                    Round(
                        up: seconds(t1 - t0), down: seconds(t2 - t1), memory: seconds(t3 - t2), disk: disk,
                        sha256: sha256, upCPU: cpu.0, downCPU: cpu.1,
                        clientDownCPU: own1.flatMap { a in own2.map { $0 - a } }))
            }
            client.close()
            return rounds
        }
        let mb = Double(options.size) / 1e6
        let mib = Double(options.size) / Double(1 << 20) * Double(rounds.count)
        func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }
        let up = rounds.map { mb / $0.up }
        let down = rounds.map { mb / $0.down }
        var line = String(
            format: "blobs size=%@ rounds=%d upload_MBps_median=%.0f upload_MBps_best=%.0f download_MBps_median=%.0f "
                + "download_MBps_best=%.0f download_memory_MBps_median=%.0f disk_floor_MBps_median=%.0f "
                + "sha256_MBps_median=%.0f window=%d", ByteSize.format(options.size), rounds.count, median(up),
            up.max()!, median(down), down.max()!, median(rounds.map { mb / $0.memory }),
            median(rounds.map { mb / $0.disk }), median(rounds.map { mb / $0.sha256 }), options.window)
        let upCPU = rounds.compactMap(\.upCPU)
        let downCPU = rounds.compactMap(\.downCPU)
        if upCPU.count == rounds.count && downCPU.count == rounds.count {
            line += String(
                format: " server_cpu_ms_per_MiB_up=%.2f server_cpu_ms_per_MiB_down=%.2f",
                upCPU.reduce(0, +) * 1000 / mib, downCPU.reduce(0, +) * 1000 / mib)
        }
        let clientCPU = rounds.compactMap(\.clientDownCPU)
        if clientCPU.count == rounds.count {
            line += String(format: " client_cpu_ms_per_MiB_down=%.2f", clientCPU.reduce(0, +) * 1000 / mib)
        }
        print(line)
    }

    static func seconds(_ d: Duration) -> Double {
        Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18
    }

    /// Reads blob `id` by ranges of `rangeBytes` into memory, `window` of them in flight and taken in order, as
    /// `writeBlob` does, but with no file and no hash: the download's floor on this connection. Answers the bytes
    /// received.
    static func downloadToMemory(
        _ client: LarderClient, _ id: UUID, size: Int, window: Int, rangeBytes: Int
    ) async throws -> Int {
        var pending: [Task<Int, any Error>] = []
        defer { for task in pending { task.cancel() } }
        var next = 0
        var received = 0
        func start() {
            let range = Int64(next)..<Int64(min(next + rangeBytes, size))
            next = Int(range.upperBound)
            pending.append(Task { try await client.blob(id, range: range).count })
        }
        while next < size && pending.count < window { start() }
        while !pending.isEmpty {
            received += try await pending.removeFirst().value
            if next < size { start() }
        }
        return received
    }

    /// Seconds to write `bytes` to a new file `url` and fdatasync it (then the file is removed): the least any
    /// durable download of them pays on this disk.
    static func writeDurably(_ bytes: [UInt8], to url: URL) throws -> Double {
        let start = ContinuousClock.now
        let fd = open(url.path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard fd >= 0 else {
            throw LarderError(.internal, "cannot create \(url.path): \(String(cString: strerror(errno)))")
        }
        defer {
            close(fd)
            unlink(url.path)
        }
        var done = 0
        while done < bytes.count {
            let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + done, $0.count - done) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else {
                throw LarderError(.internal, "cannot write \(url.path): \(String(cString: strerror(errno)))")
            }
            done += n
        }
        #if os(Linux)
        let synced = fdatasync(fd)
        #else
        let synced = fsync(fd)
        #endif
        guard synced == 0 else {
            throw LarderError(.internal, "cannot sync \(url.path): \(String(cString: strerror(errno)))")
        }
        return seconds(ContinuousClock.now - start)
    }
}
