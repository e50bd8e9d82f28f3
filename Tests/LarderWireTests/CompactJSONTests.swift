import Foundation
import LarderTestThreads
import Testing

@testable import LarderWire
import LarderIO

/// The tree-free path for documents must store exactly what the general path stores: whenever `CompactJSON` answers,
/// `JSONParser` accepts the same bytes and its tree writes the same compact bytes and holds the same string values;
/// when it cannot be sure, it answers nil.
@Suite("Documents read without a tree", .ownThreads, .timeLimit(.minutes(20)))
struct CompactJSONTests {
    /// The general path's answer for an object: its compact bytes and its string values joined by U+001F, or nil for
    /// an error.
    static func general(_ bytes: [UInt8]) -> CompactDocument? {
        guard let object = try? JSONParser.parseObject(bytes) else { return nil }
        var strings: [UInt8] = []
        var count = 0
        func walk(_ value: JSON) {
            switch value {
            case .string(let s):
                if count > 0 { strings.append(0x1F) }
                count += 1
                strings.append(contentsOf: s.utf8)
            case .array(let items): items.forEach(walk)
            case .object(let o): for (_, v) in o { walk(v) }
            default: break
            }
        }
        walk(.object(object))
        return CompactDocument(bytes: object.bytes, strings: strings, stringsAreASCII: strings.allSatisfy { $0 < 0x80 })
    }

    /// Checks the rule above for `bytes`; answers whether the fast path answered.
    @discardableResult
    static func check(_ bytes: [UInt8]) -> Bool {
        let fast = CompactJSON.object(bytes)
        if let fast {
            let general = general(bytes)
            let text = { (bytes: [UInt8]?) in bytes.map { String(decoding: $0, as: UTF8.self) } ?? "an error" }
            #expect(fast == general, "\(text(bytes)): \(text(fast.bytes)) vs \(text(general?.bytes))")
        }
        return fast != nil
    }

    static func check(_ text: String) -> Bool { check(Array(text.utf8)) }

    @Test("records as apps send them are read, with whitespace, escapes and every kind of number")
    func usualDocuments() throws {
        let texts = [
            #"{}"#,
            #"{"name":"王小明","height":172.5,"weight":64,"isMale":true,"note":null}"#,
            " {\t\"item\" :\r\n\"茶葉蛋\" , \"price\": 13 ,\"tags\":[ \"snack\" , [] , {} ] }\n",
            #"{"comment":"line one\nline \"two\"\\ \/ \t\b\f\r","nul":"\u0000\u001f\u007f"}"#,
            #"{"accent":"caf\u00e9 caf\u00C9","emoji":"\ud83d\ude00 😀","kelvin":"\u212a"}"#,
            #"{"n":[0,-0,1,-1,123456789012345678,-123456789012345678,1.0,1.50,-0.0,1e2,1E-2,2.5e+3,0.1,1e308]}"#,
            #"{"nested":{"a":{"b":{"c":[[[{"d":"deep"}]]]}}},"after":"x"}"#,
            #"{"K":1,"k":2,"a":{"K":3},"b":{"K":4}}"#,  // the same name in different objects
            #"{"名字":"林怡君","電話":"0988-111-222","生日":"1998-08-30T00:00:00Z"}"#,
            #"{"q\"uote":1,"back\\slash":2,"tab\t":3}"#,
        ]
        for text in texts { #expect(Self.check(text), "\(text)") }
        let document = CompactJSON.object(Array(#" { "a" : "x\ny" , "b" : [ 1.50 , "\u00e9" ] } "#.utf8))
        #expect(document?.bytes == Array(#"{"a":"x\ny","b":[1.5,"é"]}"#.utf8))
        #expect(document?.strings == Array("x\ny\u{1F}é".utf8))
        #expect(document?.stringsAreASCII == false)
        // Protocol.md's description of the stored form ("Compact means..."), example by example, on both paths.
        let request = Array(#"{ "s" : "a\/b \u00e9 \u0001 \t", "n" : [ -0, 1.50, 1e2, 1e300, 12345678901234567890 ] }"#.utf8)
        let stored = #"{"s":"a/b é \u0001 \t","n":[0,1.5,100.0,1e+300,1.2345678901234567e+19]}"#
        #expect(CompactJSON.object(request) == nil)  // 20 digits: left to the general path, which stores this
        #expect((try JSONParser.parseObject(request)).bytes == Array(stored.utf8))
        #expect(CompactJSON.object(Array(#"{"s":"a\/b \u00e9 \u0001 \t","n":[-0,1.50,1e2,1e300]}"#.utf8))?.bytes
            == Array(#"{"s":"a/b é \u0001 \t","n":[0,1.5,100.0,1e+300]}"#.utf8))
    }

    @Test("what the general path refuses, or might read differently, is left to it")
    func unusualDocumentsFallBack() {
        let texts = [
            #"{"a":1,"a":2}"#,  // duplicate
            "{\"K\":1,\"\u{212A}\":2}",  // KELVIN SIGN equals "K" as a String: a duplicate for the general path
            "{\"\u{00E9}\":1,\"e\u{0301}\":2}",  // canonically equivalent names
            #"{"\u00e9":1,"é":2}"#,  // the same name, escaped once
            #"{"\u212a":1,"K":2}"#,  // KELVIN SIGN, escaped
            #"{"n":1234567890123456789}"#,  // may not fit an Int64
            #"{"n":1e400}"#, #"{"n":01}"#, #"{"n":1.}"#, #"{"n":.5}"#, #"{"n":-}"#, #"{"n":+1}"#,
            #"{"s":"\ud800"}"#, #"{"s":"\udc00\ud800"}"#, #"{"s":"\x"}"#, #"{"s":"\u12"}"#,
            "{\"s\":\"tab\there\"}",  // a raw control character
            #"{"a":1,}"#, #"{"a" 1}"#, #"{"a":1"#, #"{"a":[1,]}"#, #"{"a":tru}"#, #"{"a":nul}"#, "[1]", "\"s\"", "",
            #"{"a":1} x"#,
        ]
        for text in texts {
            #expect(!Self.check(text), "\(text)")
        }
        #expect(CompactJSON.object([0x7B, 0x22, 0x61, 0x22, 0x3A, 0x22, 0xC0, 0x80, 0x22, 0x7D]) == nil)  // overlong
        let wide = "{" + (0...CompactJSON.maxMembers).map { "\"m\($0)\":\($0)" }.joined(separator: ",") + "}"
        #expect(!Self.check(wide))
        #expect(Self.general(Array(wide.utf8)) != nil)
        let exactlyMax = "{" + (1...CompactJSON.maxMembers).map { "\"m\($0)\":\($0)" }.joined(separator: ",") + "}"
        #expect(Self.check(exactlyMax))
        // Long names are compared as bytes when both are ASCII; with a non-ASCII one, the general path decides.
        let long = String(repeating: "n", count: CompactJSON.maxComparedNameBytes + 1)
        #expect(Self.check("{\"\(long)a\":1,\"\(long)b\":2}"))
        #expect(!Self.check("{\"\(long)\":1,\"名\":2}"))
        #expect(Self.general(Array("{\"\(long)\":1,\"名\":2}".utf8)) != nil)
    }

    @Test("nesting is limited where the parser limits it")
    func depthLimit() {
        func nested(_ depth: Int) -> [UInt8] {
            Array((String(repeating: #"{"a":"#, count: depth - 1) + "{}" + String(repeating: "}", count: depth - 1)).utf8)
        }
        let limit = JSONParser.defaultMaxDepth
        #expect(Self.check(nested(limit)))
        #expect(!Self.check(nested(limit + 1)))
        #expect(Self.general(nested(limit + 1)) == nil)
        // Inside a request the data object starts at depth 2, as the parser counts it.
        let inner = nested(limit - 1)
        let request = Array(#"{"collection":"c","data":"#.utf8) + inner + [UInt8(ascii: "}")]
        #expect(DocumentWrite.fast(request, opcode: .create) != nil)
        let deeper = Array(#"{"collection":"c","data":"#.utf8) + nested(limit) + [UInt8(ascii: "}")]
        #expect(DocumentWrite.fast(deeper, opcode: .create) == nil)
        #expect((try? JSONParser.parseObject(deeper)) == nil)
    }

    /// Every two-byte sequence, and three- and four-byte sequences around each boundary of Unicode's table 3-7, in a
    /// string value: read exactly when Swift's own UTF-8 validation (the general parser's) accepts them.
    @Test("UTF-8 is validated exactly as the general parser validates it")
    func utf8Validation() {
        let edges: [UInt8] = [0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF, 0xE0, 0xF4, 0xF5, 0xFF]
        var sequences: [[UInt8]] = []
        for a in 0x80...0xFF {
            for b in 0...0xFF where b != 0x22 && b != 0x5C && b >= 0x20 { sequences.append([UInt8(a), UInt8(b)]) }
        }
        for a: UInt8 in 0xE0...0xF7 {
            for b in edges + [0x81, 0xBE] {
                for c in edges where c >= 0x20 && c != 0x22 && c != 0x5C {
                    sequences.append([a, b, c])
                    sequences.append([a, b, c, 0x80])
                    sequences.append([a, b, c, 0xBF])
                }
            }
        }
        var accepted = 0
        for sequence in sequences where sequence.allSatisfy({ $0 >= 0x20 && $0 != 0x22 && $0 != 0x5C }) {
            let bytes = Array(#"{"s":""#.utf8) + sequence + Array(#""}"#.utf8)
            let fast = CompactJSON.object(bytes)
            let valid = String(validating: sequence, as: UTF8.self) != nil
            #expect((fast != nil) == valid, "\(sequence.map { String($0, radix: 16) })")
            if fast != nil { accepted += 1 }
        }
        #expect(accepted > 1_000)
    }

    /// Random documents written in every way JSON allows (random whitespace, escapes chosen at random, numbers in
    /// several spellings): the fast path must answer (they are within its limits) and agree with the tree.
    /// Strings are skipped eight plain bytes at a time: the word test agrees with the byte test for every byte value
    /// at every place in a word, and a special byte at any offset of a long string is found where it is.
    @Test("long strings are read a word at a time without missing a quote, escape, control or UTF-8 byte")
    func wordAtATime() {
        func plain(_ byte: UInt8) -> Bool { byte >= 0x20 && byte < 0x80 && byte != 0x22 && byte != 0x5C }
        for position in 0..<8 {
            for value in 0...255 {
                var bytes = [UInt8](repeating: UInt8(ascii: "a"), count: 8)
                bytes[position] = UInt8(value)
                let word = bytes.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) }
                #expect(CompactJSON.hasSpecialByte(word) == !plain(UInt8(value)), "byte \(value) at \(position)")
            }
        }
        var random = SplitMix64(seed: 0x0808_0808)
        for _ in 0..<5_000 {
            let bytes = (0..<8).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            let word = bytes.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) }
            #expect(CompactJSON.hasSpecialByte(word) == !bytes.allSatisfy(plain), "\(bytes)")
        }
        for offset in 0..<24 {
            let run = String(repeating: "x", count: offset)
            for special in ["\\\"", "\\n", "\\u00e9", "é", "中", "\u{1F600}"] {
                #expect(Self.check("{\"s\":\"\(run)\(special)\(run)yz\"}"), "\(offset) \(special)")
            }
            // A raw control character or a lone continuation byte after a plain run is refused, as the tree refuses it.
            #expect(!Self.check(Array("{\"s\":\"\(run)".utf8) + [0x09] + Array("\"}".utf8)))
            #expect(!Self.check(Array("{\"s\":\"\(run)".utf8) + [0x80] + Array("\"}".utf8)))
        }
    }

    @Test("random documents in random spellings agree with the tree")
    func randomDocuments() {
        var random = SplitMix64(seed: 0x5EED_C0DE)
        var answered = 0
        for _ in 0..<2_000 {
            var text = ""
            RandomJSON.object(depth: 0, into: &text, using: &random)
            if Self.check(Array(text.utf8)) { answered += 1 }
        }
        // The generator's names differ (a counter ends each) and its numbers fit the fast path's limits.
        #expect(answered == 2_000)
    }

    /// Valid documents with bytes flipped, inserted or removed: whatever the fast path reads, the general path reads
    /// the same way.
    @Test("mutated documents never read differently from the tree")
    func mutatedDocuments() {
        var random = SplitMix64(seed: 0xBAD_F00D)
        let alphabet = Array(#"{}[]":,\ u0123456789abcdefABCDEF.eE+-tfnlrsux"#.utf8) + [0x00, 0x1F, 0x7F, 0x80, 0xC3, 0xA9, 0xE8, 0xED, 0xF0, 0xFF]
        var answered = 0
        for _ in 0..<4_000 {
            var text = ""
            RandomJSON.object(depth: 0, into: &text, using: &random)
            var bytes = Array(text.utf8)
            for _ in 0..<Int.random(in: 1...3, using: &random) where !bytes.isEmpty {
                let at = Int.random(in: 0..<bytes.count, using: &random)
                switch Int.random(in: 0..<3, using: &random) {
                case 0: bytes[at] = alphabet.randomElement(using: &random)!
                case 1: bytes.insert(alphabet.randomElement(using: &random)!, at: at)
                default: bytes.remove(at: at)
                }
            }
            if Self.check(bytes) { answered += 1 }
        }
        #expect(answered > 100)  // some mutations leave valid JSON: those are compared too
    }

    @Test("CREATE and REPLACE in their usual forms give the general path's request")
    func documentWrites() throws {
        let id = "3f2504e0-4f89-11d3-9a0c-0305e82c3301"
        let creates = [
            #"{"collection":"todos","data":{"title":"買牛奶","done":false}}"#,
            #" { "data" : { "n" : 1.50 } , "id" : "\#(id.uppercased())" , "collection" : "todos" } "#,
            #"{"collection":"商品","id":"\#(id)","data":{}}"#,
            // null for an optional member is its absence (Protocol.md §3): a client passing it keeps the fast path.
            #"{"collection":"todos","id":null,"data":{}}"#,
            #"{"id" : null , "collection":"todos","data":{"x":null}}"#,
        ]
        for text in creates {
            let bytes = Array(text.utf8)
            let fast = try #require(DocumentWrite.fast(bytes, opcode: .create), "\(text)")
            let general = try CreateRequest(json: try JSONParser.parseObject(bytes))
            #expect(fast.collection == general.collection && fast.id == general.id && fast.rev == nil)
            #expect(fast.data.bytes == general.data.bytes)
            #expect(DocumentWrite.fast(bytes, opcode: .replace) == nil || general.id != nil)
        }
        let replaces = [
            #"{"collection":"todos","id":"\#(id)","data":{"done":true},"rev":7}"#,
            #"{"rev":123456789012345678,"data":{"done":true},"id":"\#(id)","collection":"todos"}"#,
            #"{"collection":"todos","id":"\#(id)","data":{"done":true}}"#,
            #"{"collection":"todos","id":"\#(id)","data":{"done":true},"rev":null}"#,
            #"{"rev" : null, "collection":"todos","id":"\#(id)","data":{}}"#,
        ]
        for text in replaces {
            let bytes = Array(text.utf8)
            let fast = try #require(DocumentWrite.fast(bytes, opcode: .replace), "\(text)")
            let general = try ReplaceRequest(json: try JSONParser.parseObject(bytes))
            #expect(fast.collection == general.collection && fast.id == general.id && fast.rev == general.rev)
            #expect(fast.data.bytes == general.data.bytes)
        }
        // What a client writes around an encoded document is read by both paths alike.
        let uuid = try #require(UUID(wireString: id))
        for (opcode, requestID, rev) in [(Opcode.create, nil, nil), (.create, uuid, nil), (.replace, uuid, 3)] as [(Opcode, UUID?, Int64?)] {
            let document = Array(#"{"item":"茶葉蛋","price":13,"url":"https://x/y"}"#.utf8)
            let bytes = DocumentWrite.request(collection: "shop", id: requestID, document: document, rev: rev)
            let fast = try #require(DocumentWrite.fast(bytes, opcode: opcode), "\(String(decoding: bytes, as: UTF8.self))")
            #expect(fast.collection == "shop" && fast.id == requestID && fast.rev == rev && fast.data.bytes == document)
            let object = try JSONParser.parseObject(bytes)
            if opcode == .create {
                let expected = CreateRequest(collection: "shop", id: requestID, data: try JSONParser.parseObject(document))
                #expect(try CreateRequest(json: object) == expected)
            } else {
                #expect(try ReplaceRequest(json: object).rev == rev)
            }
            // A name that needs escapes is written escaped, and read by the general path.
            let escaped = DocumentWrite.request(collection: "shop \"1\"", id: requestID, document: document, rev: rev)
            #expect(try JSONParser.parseObject(escaped)["collection"] == "shop \"1\"")
        }

        // Left to the general path: its answer may be an error, or a request in an unusual form.
        let unusual: [(Opcode, String)] = [
            (.create, #"{"collection":"todos","data":{},"extra":1}"#),
            (.create, #"{"collection":"todos","data":{},"data":{}}"#),
            (.create, #"{"collection":"to\u0064os","data":{}}"#),
            (.create, #"{"collection":"todos","data":[]}"#),
            (.create, #"{"collection":"todos"}"#),
            (.create, #"{"data":{}}"#),
            (.create, #"{"collection":"todos","id":null,"id":null,"data":{}}"#),
            (.create, #"{"collection":"todos","id":null,"id":"\#(id)","data":{}}"#),
            (.create, #"{"collection":"todos","id":"\#(id)","id":null,"data":{}}"#),
            (.create, #"{"collection":"todos","id":nul,"data":{}}"#),
            (.create, #"{"collection":"todos","id":nullx,"data":{}}"#),
            (.create, #"{"collection":"todos","data":{},"rev":null}"#),
            (.create, #"{"collection":null,"data":{}}"#),
            (.replace, #"{"collection":"todos","id":null,"data":{}}"#),
            (.replace, #"{"collection":"todos","id":"\#(id)","data":{},"rev":null,"rev":null}"#),
            (.replace, #"{"collection":"todos","id":"\#(id)","data":{},"rev":null,"rev":1}"#),
            (.create, #"{"collection":"todos","id":"not-a-uuid","data":{}}"#),
            (.create, #"{"collection":"todos","data":{},"rev":1}"#),
            (.create, "{\"collection\":\"\(String(repeating: "c", count: 257))\",\"data\":{}}"),
            (.create, #"{"collection":"todos","data":{}} {}"#),
            (.replace, #"{"collection":"todos","data":{}}"#),
            (.replace, #"{"collection":"todos","id":"\#(id)","data":{},"rev":0}"#),
            (.replace, #"{"collection":"todos","id":"\#(id)","data":{},"rev":01}"#),
            (.replace, #"{"collection":"todos","id":"\#(id)","data":{},"rev":1.0}"#),
            (.replace, #"{"collection":"todos","id":"\#(id)","data":{},"rev":1e3}"#),
            (.replace, #"{"collection":"todos","id":"\#(id)","data":{},"rev":-1}"#),
            (.replace, #"{"collection":"todos","id":"\#(id)","data":{},"rev":1234567890123456789}"#),
            // Found by the fuzzer: 20 digits overflowed the reader's Int64 (a trap, the server down).
            (.replace, #"{"collection":"todos","id":"\#(id)","data":{},"rev":90022222222222220993}"#),
            (.replace, #"{"collection":"todos","id":"\#(id)","data":{},"rev":99999999999999999999999999999}"#),
            (.delete, #"{"collection":"todos","id":"\#(id)"}"#),
        ]
        for (opcode, text) in unusual {
            #expect(DocumentWrite.fast(Array(text.utf8), opcode: opcode) == nil, "\(text)")
        }
    }
}

/// Random JSON in random spellings, for the tests above.
enum RandomJSON {
    static let words = ["a", "name", "價格", "note", "K", "é", "e\u{301}", "😀", "x y", "tab\t", "q\"", "b\\", "\u{0}", "/"]

    static func space(into text: inout String, using random: inout SplitMix64) {
        guard Int.random(in: 0..<4, using: &random) == 0 else { return }
        text += [" ", "\n", "\t", "\r\n ", "  "].randomElement(using: &random)!
    }

    static func string(_ value: String, into text: inout String, using random: inout SplitMix64) {
        text += "\""
        for scalar in value.unicodeScalars {
            let escape = Int.random(in: 0..<5, using: &random) == 0
            switch scalar {
            case "\"": text += "\\\""
            case "\\": text += "\\\\"
            case "\n": text += "\\n"
            case "\t": text += escape ? "\\u0009" : "\\t"
            case "/" where escape: text += "\\/"
            case _ where scalar.value < 0x20: text += String(format: "\\u%04x", scalar.value)
            case _ where escape && scalar.value < 0x10000: text += String(format: "\\u%04X", scalar.value)
            case _ where escape:
                let v = scalar.value - 0x10000
                text += String(format: "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF))
            default: text.unicodeScalars.append(scalar)
            }
        }
        text += "\""
    }

    static func value(depth: Int, into text: inout String, using random: inout SplitMix64) {
        switch Int.random(in: 0..<(depth < 4 ? 9 : 7), using: &random) {
        case 0: text += ["true", "false", "null"].randomElement(using: &random)!
        case 1: text += String(Int64.random(in: -999_999_999_999_999_999...999_999_999_999_999_999, using: &random))
        case 2: text += String(Int.random(in: -20...20, using: &random))
        case 3:
            text += ["0.5", "-0.0", "1.25e3", "3E-4", "172.5", "160.0", "1e+2", "-0", "0.1", "12345.678901234567"]
                .randomElement(using: &random)!
        case 4: text += String(Double.random(in: -1e6...1e6, using: &random))
        case 5, 6:
            let parts = (0..<Int.random(in: 0...3, using: &random)).map { _ in words.randomElement(using: &random)! }
            string(parts.joined(), into: &text, using: &random)
        case 7: object(depth: depth + 1, into: &text, using: &random)
        default:
            text += "["
            for n in 0..<Int.random(in: 0...4, using: &random) {
                if n > 0 { text += "," }
                space(into: &text, using: &random)
                value(depth: depth + 1, into: &text, using: &random)
                space(into: &text, using: &random)
            }
            text += "]"
        }
    }

    static func object(depth: Int, into text: inout String, using random: inout SplitMix64) {
        text += "{"
        for n in 0..<Int.random(in: 0...6, using: &random) {
            if n > 0 { text += "," }
            space(into: &text, using: &random)
            string("\(words.randomElement(using: &random)!)\(n)", into: &text, using: &random)
            space(into: &text, using: &random)
            text += ":"
            space(into: &text, using: &random)
            value(depth: depth, into: &text, using: &random)
            space(into: &text, using: &random)
        }
        text += "}"
    }
}
