import Foundation
import LarderTestThreads
import Testing

@testable import LarderWire

/// The fast path for GET and BLOB_HEAD requests must never answer differently from the general parser: whenever it
/// gives a request, the general path gives the same one; when it cannot be sure, it gives nil.
@Suite("Fast path for plain point-read requests", .ownThreads, .timeLimit(.minutes(20)))
struct FlatStringObjectTests {
    static let id = "3f2504e0-4f89-11d3-9a0c-0305e82c3301"

    /// The general path's answer: the request, or nil for an error.
    static func general(_ bytes: [UInt8]) -> GetRequest? {
        guard let object = try? JSONParser.parseObject(bytes) else { return nil }
        return try? GetRequest(json: object)
    }

    @Test("plain requests are read, in any member order and with any JSON whitespace")
    func plainForms() {
        let texts = [
            #"{"collection":"todos","id":"\#(Self.id)"}"#,
            #"{"id":"\#(Self.id)","collection":"todos"}"#,
            " {\t\"collection\" :\r\n\"todos\" , \"id\": \"\(Self.id.uppercased())\" }\n",
            #"{"collection":"商品","id":"\#(Self.id)"}"#,
        ]
        for text in texts {
            let bytes = Array(text.utf8)
            let fast = GetRequest.fast(bytes)
            #expect(fast != nil, "\(text)")
            #expect(fast == Self.general(bytes), "\(text)")
        }
        #expect(BlobIDRequest.fast(Array(#"{"id":"\#(Self.id)"}"#.utf8))?.id.wireString == Self.id)
    }

    @Test("anything unusual is left to the general path (escapes, nulls, extra or repeated members, bad ids...)")
    func unusualFormsFallBack() {
        let texts = [
            #"{"collection":"to\u0064os","id":"\#(Self.id)"}"#,  // escape: valid, general path
            #"{"collection":"todos","id":"\#(Self.id)","rev":1}"#,  // unknown member: general path's error
            #"{"collection":"todos","id":"\#(Self.id)","id":"\#(Self.id)"}"#,  // duplicate
            #"{"collection":"todos"}"#,  // missing id
            #"{"collection":null,"id":"\#(Self.id)"}"#,
            #"{"collection":"todos","id":"not-a-uuid"}"#,
            #"{"collection":"todos","id":" \#(Self.id)"}"#,
            #"{"collection":"todos","id":"\#(Self.id)"} x"#,
            #"{"collection":"todos","id":"\#(Self.id)""#,
            #"{"collection":"todos","id":"\#(Self.id)",}"#,
            #"{"collection":["todos"],"id":"\#(Self.id)"}"#,
            #"{"collection":"\#(String(repeating: "a", count: 257))","id":"\#(Self.id)"}"#,
            "{\"collection\":\"to\tdos\",\"id\":\"\(Self.id)\"}",
            "{}", "", "[]", "null",
        ]
        for text in texts { #expect(GetRequest.fast(Array(text.utf8)) == nil, "\(text)") }
        // Invalid UTF-8 in a value.
        var bytes = Array(#"{"collection":"todos","id":"\#(Self.id)"}"#.utf8)
        bytes[16] = 0xFF
        #expect(GetRequest.fast(bytes) == nil)
        #expect(Self.general(bytes) == nil)
    }

    @Test("random mutations of a request: whenever the fast path answers, the general path answers the same")
    func mutationsAgree() {
        var generator = SystemRandomNumberGenerator()
        let seeds = [
            Array(#"{"collection":"todos","id":"\#(Self.id)"}"#.utf8),
            Array(#" { "id" : "\#(Self.id)" , "collection" : "a" } "#.utf8),
        ]
        let alphabet = Array(#"{}[]":, \"#.utf8) + [0x00, 0x09, 0x0A, 0xC3, 0xA9, 0xFF, 0x61, 0x30, 0x2D]
        var answered = 0
        for _ in 0..<20_000 {
            var bytes = seeds.randomElement(using: &generator)!
            for _ in 0..<Int.random(in: 1...3, using: &generator) {
                let position = Int.random(in: 0..<bytes.count, using: &generator)
                switch Int.random(in: 0..<3, using: &generator) {
                case 0: bytes[position] = alphabet.randomElement(using: &generator)!
                case 1: bytes.insert(alphabet.randomElement(using: &generator)!, at: position)
                default: if bytes.count > 1 { bytes.remove(at: position) }
                }
            }
            if let fast = GetRequest.fast(bytes) {
                answered += 1
                #expect(Self.general(bytes) == fast, "\(String(decoding: bytes, as: UTF8.self))")
            }
        }
        // Mostly whitespace and collection-name changes survive; the point is agreement, but some must be answered.
        #expect(answered > 0)
    }
}
