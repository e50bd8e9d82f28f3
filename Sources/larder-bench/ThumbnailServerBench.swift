#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Dispatch
import Foundation
import LarderClient
import LarderIO
import LarderThumbnails
import LarderWire

/// `larder-bench thumb-server`: thumbnail latency through a running server over TCP, cold and cached.
///
/// It uploads `--photos` distinct 12-megapixel JPEGs, then for each size asks every photo for its thumbnail once (cold:
/// the server decodes the photo, makes the thumbnail and caches it) and then `--cached-rounds` times more (cached: the
/// store's copy). One request in flight, so a latency is one request's whole trip; STATS' thumbnail counters are read
/// around each phase to prove that the cold requests were made and the cached ones served from the cache. With
/// `--server-pid` (a server on this machine) it also reports the server's CPU per request of each phase, which moves
/// far less than the latency with the load of a shared machine.
enum ThumbnailServerBench {
    struct Options: SubcommandOptions {
        var host = "127.0.0.1"
        var port = 7411
        var token: String?
        var photos = 30
        var cachedRounds = 5
        var sizes = [256, 1024]
        var serverPID: Int32?
        var photoFile: String?
        var savePhoto: String?
        var json = false

        static let usage = "Usage: larder-bench thumb-server [--host H] [--port N] [--token T] [--photos N] "
            + "[--cached-rounds N] [--sizes 256,1024] [--server-pid PID] [--photo FILE] [--save-photo FILE] [--json]"

        static let help = """
            larder-bench thumb-server: thumbnail latency through a running larder-server, cold and cached

            \(usage)

            Uploads --photos distinct 12-megapixel JPEGs (default 30), made here with TurboJPEG from a picture with
            camera-like detail (gradients, shapes and sensor-like noise; quality 90, 4:2:0; about 4-5 MB each), or
            --photo FILE uploaded that many times under new ids. Then, for each of --sizes (default 256,1024), asks
            each photo for its thumbnail once (cold: made by the server and cached) and --cached-rounds more times
            (cached, default 5), one request in flight, and prints p50, p99 and max milliseconds of each phase.
            --server-pid PID (the server runs on this machine) adds the server's CPU milliseconds per request of each
            phase, from /proc/PID/stat. --save-photo FILE writes the first photo, to look at. The photos are deleted
            at the end.

            """

        /// Takes `argument` if it is one of this subcommand's own options, reading its value from `scanner`.
        mutating func take(
            _ argument: ArgumentScanner.Argument, from scanner: inout ArgumentScanner
        ) throws(BenchUsage) -> Bool {
            switch argument.name {
            case "--host": self.host = try scanner.string(argument)
            case "--port": self.port = try scanner.int(argument)
            case "--token": self.token = try scanner.string(argument)
            case "--photos": self.photos = try scanner.int(argument)
            case "--cached-rounds": self.cachedRounds = try scanner.int(argument)
            case "--sizes":
                let text = try scanner.string(argument)
                let sizes = text.split(separator: ",").compactMap { Int($0) }
                guard !sizes.isEmpty, sizes.count == text.split(separator: ",").count, sizes.allSatisfy({ $0 > 0 })
                else { throw BenchUsage("--sizes needs thumbnail sizes separated by commas, e.g. 256,1024") }
                self.sizes = sizes
            case "--server-pid": self.serverPID = Int32(try scanner.int(argument))
            case "--photo": self.photoFile = try scanner.string(argument)
            case "--save-photo": self.savePhoto = try scanner.string(argument)
            case "--json":
                try scanner.flag(argument)
                self.json = true
            default: return false
            }
            return true
        }
    }

    /// One phase's figures: request latencies and, with a server pid, the server's CPU over the phase.
    struct Phase {
        var size: Int
        var cold: Bool
        var milliseconds: [Double] = []
        var serverCPUSeconds: Double?
        /// STATS' thumbnails made and served from the cache during the phase.
        var made = 0
        var fromCache = 0

        var name: String { cold ? "cold" : "cached" }

        func percentile(_ p: Double) -> Double {
            let sorted = milliseconds.sorted()
            return sorted[min(sorted.count - 1, max(0, Int((Double(sorted.count) * p).rounded(.up)) - 1))]
        }

        var json: JSON {
            var o: JSONObject = [
                "size": .int(Int64(size)), "phase": .string(name), "requests": .int(Int64(milliseconds.count)),
                "p50Ms": .double(percentile(0.5)), "p99Ms": .double(percentile(0.99)),
                "maxMs": .double(milliseconds.max() ?? 0), "made": .int(Int64(made)),
                "fromCache": .int(Int64(fromCache)),
            ]
            if let cpu = serverCPUSeconds {
                o["serverCPUMsPerRequest"] = .double(cpu * 1000 / Double(milliseconds.count))
            }
            return .object(o)
        }
    }

    static func run(_ o: Options) throws(LarderError) {
        let photos: PhotoSource
        let source: String
        if let file = o.photoFile {
            guard let data = FileManager.default.contents(atPath: file) else {
                throw LarderError(.invalidArgument, "cannot read \(file)")
            }
            photos = PhotoSource(file: Array(data))
            source = file
        } else {
            photos = PhotoSource(file: nil)
            source = "made here (TurboJPEG, quality 90, 4:2:0, gradients + shapes + sensor-like noise)"
        }
        let first = try photos.photo(0)
        let (width, height) = try Thumbnailer.header(first)
        if let path = o.savePhoto {
            guard FileManager.default.createFile(atPath: path, contents: Data(first)) else {
                throw LarderError(.invalidArgument, "cannot write \(path)")
            }
        }
        if !o.json {
            print(
                String(
                    format: "thumb-server: %d photos of %dx%d (%.1f MP), %.2f MB the first, %@; %d cached rounds; "
                        + "one request in flight over TCP to %@:%d", o.photos, width, height,
                    Double(width * height) / 1e6, Double(first.count) / 1e6, source, o.cachedRounds, o.host, o.port))
        }
        let (phases, bytes) = try waitForTask { () async throws(LarderError) -> ([Phase], Int) in
            try await measure(o, photos)
        }
        if o.json {
            let result: JSONObject = [
                "photos": .int(Int64(o.photos)), "width": .int(Int64(width)), "height": .int(Int64(height)),
                "averageBytes": .int(Int64(bytes / o.photos)), "source": .string(source),
                "phases": .array(phases.map(\.json)),
            ]
            print(String(decoding: JSON.object(result).bytes, as: UTF8.self))
            return
        }
        print(String(format: "%.2f MB per photo on average", Double(bytes) / Double(o.photos) / 1e6))
        print("| size | phase | requests | p50 ms | p99 ms | max ms | server CPU ms/request | made / from cache |")
        print("|---:|---|---:|---:|---:|---:|---:|---|")
        for phase in phases {
            let requests = Double(phase.milliseconds.count)
            let cpu = phase.serverCPUSeconds.map { String(format: "%.2f", $0 * 1000 / requests) }
            print(
                String(
                    format: "| %d | %@ | %d | %.2f | %.2f | %.2f | %@ | %d / %d |", phase.size, phase.name,
                    phase.milliseconds.count, phase.percentile(0.5), phase.percentile(0.99),
                    phase.milliseconds.max() ?? 0, cpu ?? "-", phase.made, phase.fromCache))
        }
    }

    /// Uploads the photos, runs the phases, deletes the photos; the phases and the bytes uploaded.
    static func measure(_ o: Options, _ photos: PhotoSource) async throws(LarderError) -> ([Phase], Int) {
        let client = LarderClient(host: o.host, port: o.port, token: o.token, requestTimeout: .seconds(120))
        defer { client.close() }
        let offered = try await client.serverHello().limits.thumbnailSizes
        for size in o.sizes where !offered.contains(size) {
            throw LarderError(
                .invalidArgument,
                "the server makes thumbnails of \(offered.map(String.init).joined(separator: ", ")) pixels, "
                    + "not \(size)")
        }
        var ids: [UUID] = []
        var bytes = 0
        for copy in 0..<o.photos {
            let photo = try photos.photo(copy)
            bytes += photo.count
            var digest = SHA256()
            digest.update(photo)
            ids.append(try await client.blobPut(Data(photo), sha256: digest.finalizeHex()).id)
        }
        var phases: [Phase] = []
        for size in o.sizes {
            for cold in [true, false] {
                var phase = Phase(size: size, cold: cold)
                let before = try await counters(client)
                let cpuBefore = o.serverPID.flatMap(processCPUSeconds)
                for _ in 0..<(cold ? 1 : o.cachedRounds) {
                    for id in ids {
                        let start = ContinuousClock.now
                        let thumbnail = try await client.thumbnail(id, maxSide: size)
                        let took = ContinuousClock.now - start
                        guard let made = thumbnail.info.thumbnail, max(made.width, made.height) <= size else {
                            throw LarderError(.internal, "the server answered no \(size)-pixel thumbnail for \(id)")
                        }
                        phase.milliseconds.append(
                            Double(took.components.seconds) * 1000 + Double(took.components.attoseconds) / 1e15)
                    }
                }
                if let pid = o.serverPID, let start = cpuBefore, let end = processCPUSeconds(pid) {
                    phase.serverCPUSeconds = end - start
                }
                let after = try await counters(client)
                phase.made = after.made - before.made
                phase.fromCache = after.fromCache - before.fromCache
                phases.append(phase)
            }
        }
        for id in ids { _ = try? await client.blobDelete(id) }
        return (phases, bytes)
    }

    /// STATS' thumbnail counters: made since the server started, and served from its cache.
    static func counters(_ client: LarderClient) async throws(LarderError) -> (made: Int, fromCache: Int) {
        let stats = try await client.stats()
        guard case .object(let thumbnails)? = stats["thumbnails"], case .int(let made)? = thumbnails["made"],
            case .int(let fromCache)? = thumbnails["fromCache"]
        else { throw LarderError(.internal, "STATS has no thumbnail counters: is this a larder-server?") }
        return (Int(made), Int(fromCache))
    }

    /// The photos, each made when it is uploaded (a few hundred held at once would be gigabytes): `file` each time, or
    /// distinct 4000×3000 JPEGs with a phone photo's weight, made from a picture with the detail a camera records
    /// (smooth gradients, soft shapes, and sensor-like noise: luminance noise plus weaker colour noise) encoded at
    /// quality 90, 4:2:0 as phones do. A flat synthetic picture compresses ten times better than a photo and so
    /// decodes faster: the thumbnail's cost is mostly the entropy decoding of the photo. Copies differ in a few pixels
    /// of their first row, so each is a blob of its own.
    final class PhotoSource: @unchecked Sendable {  // used by one task at a time
        private let file: [UInt8]?
        private var image: RGBImage

        init(file: [UInt8]?) {
            self.file = file
            image = file == nil ? ThumbnailServerBench.cameraLikeImage(width: 4000, height: 3000)
                : RGBImage(width: 1, height: 1, pixels: [0, 0, 0])
        }

        func photo(_ copy: Int) throws(LarderError) -> [UInt8] {
            if let file { return file }
            for bit in 0..<32 {
                let value: UInt8 = (copy >> bit) & 1 == 0 ? 0 : 255
                for channel in 0..<3 { image.pixels[bit * 3 + channel] = value }
            }
            return try Thumbnailer.encode(image, quality: 90)
        }
    }

    /// The picture itself, deterministic (a fixed-seed xorshift generator).
    static func cameraLikeImage(width: Int, height: Int) -> RGBImage {
        var pixels = [UInt8](repeating: 0, count: width * height * 3)
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        func random() -> UInt64 {
            state ^= state << 13
            state ^= state >> 7
            state ^= state << 17
            return state
        }
        // A few soft discs over a sky-to-ground gradient: edges and smooth areas, as in a scene.
        let discs: [(x: Double, y: Double, r: Double, colour: (Double, Double, Double))] = (0..<24).map { _ in
            (
                Double(random() % UInt64(width)), Double(random() % UInt64(height)),
                Double(100 + random() % 700),
                (Double(random() % 256), Double(random() % 256), Double(random() % 256))
            )
        }
        for y in 0..<height {
            let fy = Double(y) / Double(height)
            for x in 0..<width {
                let fx = Double(x) / Double(width)
                var r = 40 + 150 * (1 - fy) + 30 * fx
                var g = 60 + 120 * (1 - fy) + 20 * sin(fx * 9)
                var b = 90 + 140 * (1 - fy) * (1 - fx / 2)
                for disc in discs {
                    let dx = Double(x) - disc.x, dy = Double(y) - disc.y
                    let d2 = dx * dx + dy * dy
                    if d2 < disc.r * disc.r {
                        let shade = 0.7 + 0.3 * (1 - d2 / (disc.r * disc.r))
                        (r, g, b) = (disc.colour.0 * shade, disc.colour.1 * shade, disc.colour.2 * shade)
                    }
                }
                // Sensor noise: a triangular distribution of luminance (±24) and weaker colour noise (±8).
                let n = random()
                let luma = Double(Int(n & 0xFF) + Int((n >> 8) & 0xFF) - 255) * 24 / 255
                let cr = Double(Int((n >> 16) & 0xFF) - 128) * 8 / 128
                let cb = Double(Int((n >> 24) & 0xFF) - 128) * 8 / 128
                let at = (y * width + x) * 3
                pixels[at] = clamp(r + luma + cr)
                pixels[at + 1] = clamp(g + luma)
                pixels[at + 2] = clamp(b + luma + cb)
            }
        }
        return RGBImage(width: width, height: height, pixels: pixels)
    }

    static func clamp(_ value: Double) -> UInt8 { UInt8(max(0, min(255, value.rounded()))) }
}
