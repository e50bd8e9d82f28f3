import Foundation
import LarderClient
import LarderStore
import LarderWire

/// `larder-bench wire`: codec throughput, measured in-process (no sockets).
///
/// 1. encode + decode of a GET response carrying a ~250-byte record, frames per second;
/// 2. zlib on a 100-record SEARCH response at each level: compress MB/s, inflate MB/s and the size ratio, plus the
///    same for the shortest JSON parts, which is where the compression threshold comes from.
enum WireBench {
    static func run(seconds: Double) {
        let record = sampleRecord(n: 1)
        print("wire benchmark (\(String(format: "%.1f", seconds)) s per case)")
        print("GET response JSON part: \(record.count) bytes")
        let encoder = FrameEncoder()
        var out: [UInt8] = []
        out.reserveCapacity(4096)
        var decoder = FrameDecoder()
        var buffer = ByteBuffer()
        var frames = 0
        let fps = measure(seconds: seconds) {
            for _ in 0..<1000 {
                out.removeAll(keepingCapacity: true)
                record.withUnsafeBytes { json in
                    encoder.encode(opcode: .get, requestID: UInt32(truncatingIfNeeded: frames), flags: .response,
                                   json: json, into: &out)
                }
                buffer.append(out)
                guard let frame = try? decoder.next(&buffer), frame.json.count == record.count else {
                    fatalError("decode failed")
                }
                frames += 1
            }
            return 1000
        }
        print(String(format: "encode+decode GET response: %.0f frames/s (%.0f ns/frame)", fps, 1e9 / fps))

        let page = (1...100).flatMap { n -> [UInt8] in
            (n == 1 ? Array(#"{"records":["#.utf8) : [UInt8(ascii: ",")]) + sampleRecord(n: n)
        } + Array(#"],"nextCursor":null}"#.utf8)
        typedDecoding(record, seconds: seconds)

        print("\nSEARCH response, 100 records: \(page.count) bytes of JSON")
        print("level  compressed  ratio  compress MB/s  inflate MB/s")
        for level: Int32 in [1, 3, 6, 9] {
            let deflater = Deflater(level: level)
            var compressed: [UInt8] = []
            let rate = measure(seconds: seconds / 2) {
                for _ in 0..<20 {
                    compressed.removeAll(keepingCapacity: true)
                    _ = page.withUnsafeBytes { deflater.compress($0, into: &compressed, maxOutput: page.count) }
                }
                return 20
            }
            let inflater = Inflater()
            let inflateRate = measure(seconds: seconds / 2) {
                for _ in 0..<20 {
                    _ = try? compressed.withUnsafeBytes { try inflater.inflate($0, expectedLength: page.count) }
                }
                return 20
            }
            print(String(format: "%5d  %10d  %5.2f  %13.1f  %12.1f", level, compressed.count,
                         Double(page.count) / Double(compressed.count),
                         rate * Double(page.count) / 1e6, inflateRate * Double(page.count) / 1e6))
        }
        print("\nsmall parts at level 1 (threshold): size -> compressed")
        for records in [1, 2, 4, 8] {
            let part = Array(page.prefix(records * (record.count + 1) + 12))
            var compressed: [UInt8] = []
            _ = part.withUnsafeBytes { Deflater(level: 1).compress($0, into: &compressed, maxOutput: part.count * 2) }
            print("  \(part.count) -> \(compressed.count)")
        }
    }

    /// A sample record of the shop diary app.
    struct Purchase: Codable, Sendable {
        var store: String
        var item: String
        var date: Date
        var price: Int
        var discount: Bool
        var comment: String
    }

    /// A typed client's decoding of a GET answer: through the answer's JSON tree (`Record`, then the data object
    /// written out again for `JSONDecoder`) against the stored bytes handed to the decoder as they are.
    static func typedDecoding(_ answer: [UInt8], seconds: Double) {
        let viaTree = measure(seconds: seconds / 2) {
            for _ in 0..<200 {
                guard let object = try? JSONParser.parseObject(answer), let record = try? Record(json: object),
                    (try? Stored<Purchase>(record)) != nil
                else { fatalError("decode failed") }
            }
            return 200
        }
        let direct = measure(seconds: seconds / 2) {
            for _ in 0..<200 where (try? Stored<Purchase>(answer: answer)) == nil { fatalError("decode failed") }
            return 200
        }
        print(String(format: "typed GET answer decode: via the JSON tree %.0f /s, stored bytes to the decoder %.0f /s (%.2fx)",
                     viaTree, direct, direct / viaTree))
        guard let value = try? Stored<Purchase>(answer: answer).value else { fatalError("decode failed") }
        let encodeViaTree = measure(seconds: seconds / 2) {
            for _ in 0..<200 {
                guard let data = try? ModelCoding.encode(value) else { fatalError("encode failed") }
                _ = CreateRequest(collection: "items", data: data).json.bytes
            }
            return 200
        }
        let encodeDirect = measure(seconds: seconds / 2) {
            for _ in 0..<200 {
                guard let document = try? ModelCoding.encodeDocument(value) else { fatalError("encode failed") }
                _ = DocumentWrite.request(collection: "items", id: nil, document: document)
            }
            return 200
        }
        print(String(format: "typed CREATE request encode: via the JSON tree %.0f /s, encoder's bytes %.0f /s (%.2fx)",
                     encodeViaTree, encodeDirect, encodeDirect / encodeViaTree))

        // The server's side: a CREATE request to the stored bytes and search text the writer binds.
        guard let document = try? ModelCoding.encodeDocument(value) else { fatalError("encode failed") }
        let request = DocumentWrite.request(collection: "items", id: nil, document: document)
        let prepareViaTree = measure(seconds: seconds / 2) {
            for _ in 0..<200 {
                guard let object = try? JSONParser.parseObject(request), let create = try? CreateRequest(json: object)
                else { fatalError("parse failed") }
                _ = PreparedDocument(create.data)
            }
            return 200
        }
        let prepareDirect = measure(seconds: seconds / 2) {
            for _ in 0..<200 {
                guard let write = DocumentWrite.fast(request, opcode: .create) else { fatalError("parse failed") }
                _ = PreparedDocument(write.data)
            }
            return 200
        }
        print(String(format: "server: CREATE request to stored form: via the JSON tree %.0f /s, without %.0f /s (%.2fx)",
                     prepareViaTree, prepareDirect, prepareDirect / prepareViaTree))
    }

    /// A record like the shop diary's, about 250 bytes, with varying content.
    static func sampleRecord(n: Int) -> [UInt8] {
        let stores = ["7-Eleven", "FamilyMart 全家", "Hi-Life 萊爾富", "OK mart"]
        let items = ["鮪魚飯糰", "Iced latte 冰拿鐵", "茶葉蛋", "Instant noodles 泡麵"]
        let id = String(format: "%08x-4f89-41d3-9a0c-%012x", n * 2_654_435_761 & 0xFFFF_FFFF, n * 40503)
        let text = """
            {"id":"\(id)","rev":\(n % 7 + 1),"createdAt":"2026-11-30T00:26:\(String(format: "%02d", n % 60)).123Z",\
            "updatedAt":"2026-11-30T00:27:01.456Z","data":{"store":"\(stores[n % 4])","item":"\(items[(n / 4) % 4])",\
            "date":"2024-05-\(String(format: "%02d", n % 28 + 1))T12:30:00Z","price":\(13 + n % 50),\
            "discount":\(n % 3 == 0),"comment":"好吃 #\(n)"}}
            """
        return Array(text.utf8)
    }

    /// Runs `body` repeatedly for about `seconds`; returns operations per second (`body` returns its count).
    static func measure(seconds: Double, _ body: () -> Int) -> Double {
        _ = body()
        var operations = 0
        let start = DispatchTime.now().uptimeNanoseconds
        var elapsed: UInt64 = 0
        repeat {
            operations += body()
            elapsed = DispatchTime.now().uptimeNanoseconds - start
        } while Double(elapsed) < seconds * 1e9
        return Double(operations) / (Double(elapsed) / 1e9)
    }
}
