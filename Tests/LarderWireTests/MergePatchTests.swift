import LarderTestThreads
import Testing

@testable import LarderWire
import LarderIO

/// A merge patch applied to a document's stored bytes without the document's tree must give exactly what the tree
/// gives: the bytes `JSONObject.bytes` writes for `MergePatch.apply`, and the same search text; when it cannot be
/// sure, it answers nil.
@Suite("Merge patches applied to stored bytes", .ownThreads, .timeLimit(.minutes(20)))
struct MergePatchTests {
    /// The tree path's answer: the merged document's compact bytes and its folded search text, or nil for an error.
    static func tree(_ patch: JSONObject, _ stored: [UInt8]) -> (bytes: [UInt8], search: [UInt8])? {
        guard let document = try? JSONParser.parseObject(stored) else { return nil }
        let merged = MergePatch.apply(patch, to: document)
        return (merged.bytes, TextFold.searchBytes(merged))
    }

    /// Checks the rule above for one patch; answers whether the bytes were merged without the tree.
    @discardableResult
    static func check(
        _ patch: JSONObject, _ stored: [UInt8], sourceLocation: SourceLocation = #_sourceLocation
    ) -> Bool {
        guard let fast = MergePatch.apply(patch, toStored: stored) else { return false }
        let general = tree(patch, stored)
        let text = { (bytes: [UInt8]?) in bytes.map { String(decoding: $0, as: UTF8.self) } ?? "an error" }
        #expect(
            fast.bytes == general?.bytes, "\(text(stored)) + \(patch): \(text(fast.bytes)) vs \(text(general?.bytes))",
            sourceLocation: sourceLocation)
        #expect(
            TextFold.fold(joined: fast.strings, ascii: fast.stringsAreASCII) == general?.search,
            "\(text(stored)) + \(patch): search text", sourceLocation: sourceLocation)
        return true
    }

    static func object(_ text: String) throws -> JSONObject { try JSONParser.parseObject(Array(text.utf8)) }

    @Test("members removed, added and replaced where the tree puts them")
    func membersInPlace() throws {
        let cases: [(stored: String, patch: String, merged: String)] = [
            (#"{"a":1,"b":2,"c":3}"#, #"{"c":null}"#, #"{"a":1,"b":2}"#),
            (#"{"a":1,"b":2,"c":3}"#, #"{"a":null}"#, #"{"b":2,"c":3}"#),
            (#"{"a":1,"b":2,"c":3}"#, #"{"b":null}"#, #"{"a":1,"c":3}"#),
            (#"{"a":1}"#, #"{"a":null}"#, #"{}"#),
            (#"{"a":1,"b":2}"#, #"{"a":null,"b":null}"#, #"{}"#),
            (#"{}"#, #"{"a":"x"}"#, #"{"a":"x"}"#),
            (#"{}"#, #"{"a":null}"#, #"{}"#),
            (#"{}"#, #"{}"#, #"{}"#),
            (#"{"a":1}"#, #"{}"#, #"{"a":1}"#),
            (#"{"a":1,"b":2}"#, #"{"z":0,"a":null,"y":[1]}"#, #"{"b":2,"z":0,"y":[1]}"#),
            (#"{"a":1,"b":2,"c":3}"#, #"{"b":"now a much longer value"}"#,
             #"{"a":1,"b":"now a much longer value","c":3}"#),
            (#"{"a":"a much longer value than the next","b":2}"#, #"{"a":0}"#, #"{"a":0,"b":2}"#),
            (#"{"a":[1,{"b":"]"}],"c":"}"}"#, #"{"a":true}"#, #"{"a":true,"c":"}"}"#),
            // Nested objects merge member by member; a patch object meeting anything else replaces it, nulls dropped.
            (#"{"p":{"x":1,"y":2},"q":3}"#, #"{"p":{"x":null,"z":{"w":null,"v":1}}}"#,
             #"{"p":{"y":2,"z":{"v":1}},"q":3}"#),
            (#"{"p":{"x":{"deep":"a"}}}"#, #"{"p":{"x":{"deep":"b","more":1}}}"#,
             #"{"p":{"x":{"deep":"b","more":1}}}"#),
            (#"{"p":5,"q":[1]}"#, #"{"p":{"a":null,"b":{"c":null}},"q":{}}"#, #"{"p":{"b":{}},"q":{}}"#),
            (#"{"p":{}}"#, #"{"p":{"a":1}}"#, #"{"p":{"a":1}}"#),
            (#"{"p":{"a":1}}"#, #"{"p":{"a":null}}"#, #"{"p":{}}"#),
            (#"{"p":{"a":1}}"#, #"{"p":[]}"#, #"{"p":[]}"#),
            // Unicode and escapes, in names and values, in the document and the patch.
            (#"{"名字":"林怡君","n":1}"#, #"{"名字":"王小明 😀","note":"line\n\"q\" \\ \u0001 \/"}"#,
             #"{"名字":"王小明 😀","n":1,"note":"line\n\"q\" \\ \u0001 /"}"#),
            (#"{"q\"uote":1,"tab\t":2,"b\\s":3}"#, #"{"q\"uote":null,"tab\t":"\u00e9"}"#, #"{"tab\t":"é","b\\s":3}"#),
            (#"{"s":"caf\u00e9 \ud83d\ude00","t":"Ünïcödé"}"#, #"{"u":"ÀB"}"#,
             #"{"s":"café 😀","t":"Ünïcödé","u":"ÀB"}"#),
            // Numbers in the form the writer gives them.
            (#"{"a":1e20,"b":-0.0,"c":123456789012345678,"d":-0,"e":1.50}"#,
             #"{"f":1e+20,"g":-0.0,"h":-123456789012345678}"#,
             #"{"a":1e+20,"b":-0.0,"c":123456789012345678,"d":0,"e":1.5,"f":1e+20,"g":-0.0,"h":-123456789012345678}"#),
            (#"{"a":1,"b":2}"#, #"{"a":0.1,"b":2.5e-8}"#, #"{"a":0.1,"b":2.5e-08}"#),
            (#"{"a":1}"#, #"{"a":9223372036854775807,"b":-9223372036854775808}"#,
             #"{"a":9223372036854775807,"b":-9223372036854775808}"#),
            // A document not in the compact form reads as the tree reads it.
            (" { \"a\" : [ 1 , 2 ] ,\n\"b\" : { \"c\" : 1 } } ", #"{"b":{"d":2}}"#, #"{"a":[1,2],"b":{"c":1,"d":2}}"#),
        ]
        for (stored, text, merged) in cases {
            let patch = try Self.object(text)
            let bytes = Array(stored.utf8)
            #expect(Self.check(patch, bytes), "\(stored) + \(text)")
            #expect(MergePatch.apply(patch, toStored: bytes)?.bytes == Array(merged.utf8), "\(stored) + \(text)")
        }
    }

    @Test("names are matched as the tree's keys are: as strings")
    func namesMatchAsStrings() throws {
        // Canonically equivalent names are one key: the document's spelling stays where it was.
        let cases: [(stored: String, patch: JSONObject, merged: String)] = [
            ("{\"\u{E9}\":1,\"x\":2}", ["e\u{301}": 3], "{\"\u{E9}\":3,\"x\":2}"),
            ("{\"e\u{301}\":1,\"x\":2}", ["\u{E9}": JSON.null], #"{"x":2}"#),
            (#"{"K":1}"#, ["\u{212A}": 2], #"{"K":2}"#),
            ("{\"\u{212A}\":1}", ["K": 2], "{\"\u{212A}\":2}"),
            (#"{"\u00e9":1}"#, ["é": 2], #"{"é":2}"#),
            (#"{"a\/b":1}"#, ["a/b": JSON.null, "c": 1], #"{"c":1}"#),
        ]
        for (stored, patch, merged) in cases {
            let bytes = Array(stored.utf8)
            #expect(Self.check(patch, bytes), "\(stored) + \(patch)")
            #expect(MergePatch.apply(patch, toStored: bytes)?.bytes == Array(merged.utf8), "\(stored) + \(patch)")
        }
    }

    @Test("what it cannot be sure of is left to the tree")
    func uncertainCasesFallBack() throws {
        let cases: [(stored: String, patch: JSONObject)] = [
            (#"{"a":1,"a":2}"#, ["a": JSON.null]),  // a duplicate, which the parser refuses
            (#"{"a":1,"a":2}"#, ["a": 3]),
            (#"{"a":1,"a":2}"#, ["b": 3]),
            ("{\"\u{E9}\":1,\"e\u{301}\":2}", ["\u{E9}": 3]),  // canonically equivalent, so duplicates
            (#"{"K":1,"\u212a":2}"#, ["b": 1]),
            (#"{"a":tru,"b":1}"#, ["a": JSON.null]),  // a dropped value the parser would refuse
            (#"{"a":"\ud800","b":1}"#, ["a": 2]),
            (#"{"a":{"x":01}}"#, ["a": ["y": 1]]),
            (#"{"a\u0":1}"#, ["b": 1]),  // a name the parser would refuse
            (#"{"a":1234567890123456789}"#, ["b": 1]),  // 19 digits: CompactJSON's limit
            (#"{"a":1234567890123456789}"#, ["a": 1]),
            (#"{"a":1,}"#, ["b": 1]),
            (#"{"a":1} x"#, ["b": 1]),
            (#"{"a":1"#, ["b": 1]),
            ("[1]", ["b": 1]),
            ("", ["b": 1]),
        ]
        for (stored, patch) in cases {
            #expect(MergePatch.apply(patch, toStored: Array(stored.utf8)) == nil, "\(stored) + \(patch)")
        }
        // What falls back still merges on the tree, where the parser reads the document.
        let wide = "{" + (0...CompactJSON.maxMembers).map { "\"m\($0)\":\($0)" }.joined(separator: ",") + "}"
        #expect(MergePatch.apply(["m0": JSON.null], toStored: Array(wide.utf8)) == nil)
        #expect(Self.tree(["m0": JSON.null], Array(wide.utf8)) != nil)
        var widePatch = JSONObject()
        for n in 0...CompactJSON.maxMembers { widePatch["m\(n)"] = .int(Int64(n)) }
        #expect(MergePatch.apply(widePatch, toStored: Array(#"{"a":1}"#.utf8)) == nil)
        #expect(Self.tree(widePatch, Array(#"{"a":1}"#.utf8)) != nil)
        let large = Array(#"{"a":9223372036854775807}"#.utf8)
        #expect(Self.tree(["b": 1], large)?.bytes == Array(#"{"a":9223372036854775807,"b":1}"#.utf8))
    }

    /// A patch for `base` (nil: a member the document does not have or that is no object): names it has and names it
    /// does not, nulls, nested patches, and values of every kind.
    static func randomPatch(for base: JSONObject?, depth: Int, using random: inout SplitMix64) -> JSONObject {
        let specials: [JSON] = [
            .double(1e20), .double(-0.0), .double(0.1), .double(-1.5e-300), .int(123_456_789_012_345_678),
            .int(-123_456_789_012_345_678), .int(0), .string("line\n\"quoted\" \\ \u{0}\u{1F} \u{7F} é 中 😀"),
            .string(""), .array([]), .object([:]), .array([.object(["k": .string("V")]), .null]), .int(Int64.max),
            .int(Int64.min), .double(.infinity),
        ]
        var patch = JSONObject()
        let names = base?.keys ?? []
        for _ in 0..<Int.random(in: 0...4, using: &random) {
            let key =
                !names.isEmpty && Bool.random(using: &random)
                ? names.randomElement(using: &random)!
                : RandomJSON.words.randomElement(using: &random)! + String(Int.random(in: 0...7, using: &random))
            switch Int.random(in: 0..<8, using: &random) {
            case 0, 1: patch[key] = JSON.null
            case 2...3 where depth < 3:
                patch[key] = .object(randomPatch(for: base?[key]?.objectValue, depth: depth + 1, using: &random))
            case 4: patch[key] = specials.randomElement(using: &random)!
            default:
                var text = ""
                RandomJSON.value(depth: 2, into: &text, using: &random)
                patch[key] = try? JSONParser.parse(Array(text.utf8))
            }
        }
        return patch
    }

    @Test("random documents and random patches merge as the tree merges them")
    func randomPatches() throws {
        var random = SplitMix64(seed: 0x9A7C_4E5D)
        var merged = 0
        var tried = 0
        for _ in 0..<4_000 {
            var text = ""
            RandomJSON.object(depth: 0, into: &text, using: &random)
            guard let document = try? JSONParser.parseObject(Array(text.utf8)) else { continue }
            tried += 1
            let patch = Self.randomPatch(for: document, depth: 0, using: &random)
            // Stored as the server stores it, and as written with random whitespace and escapes.
            if Self.check(patch, document.bytes) { merged += 1 }
            Self.check(patch, Array(text.utf8))
        }
        // The generator's documents are within CompactJSON's limits, so none is left to the tree.
        #expect(tried > 3_900)
        #expect(merged == tried)
    }
}
