import Foundation
import LarderClient

/// What a command runs with.
struct Context: Sendable {
    var invocation: Invocation
    var client: LarderClient
    var output: Output

    var arguments: [String] { invocation.arguments }

    func collection(_ index: Int = 0) -> String { arguments[index] }

    func uuid(_ text: String, _ what: String = "ID") throws(UsageError) -> UUID {
        guard let id = UUID(wireString: text) else {
            throw UsageError(
                "\(what) must be a UUID like 3f2504e0-4f89-11d3-9a0c-0305e82c3301",
                excerpt: UsageError.Excerpt(text, offset: 0, length: text.count))
        }
        return id
    }

    /// A JSON object argument; a mistake points at the character where the JSON went wrong.
    func object(_ text: String, _ what: String = "the JSON argument") throws(UsageError) -> JSONObject {
        let value: JSON
        do throws(LarderError) {
            value = try JSONParser.parse(Array(text.utf8))
        } catch {
            let (message, byte) = FilterSyntax.jsonMistake(error)
            let offset = byte.map { FilterSyntax.characterOffset(text, byte: $0) } ?? 0
            throw UsageError("\(what) does not parse: \(message)", excerpt: UsageError.Excerpt(text, offset: offset))
        }
        guard case .object(let object) = value else {
            throw UsageError(
                "\(what) must be a JSON object such as '{\"name\":\"poke-ball\"}', not \(value.typeNameWithArticle)",
                excerpt: UsageError.Excerpt(text, offset: 0, length: text.count))
        }
        return object
    }

    func int(_ name: String, range: ClosedRange<Int>) throws(UsageError) -> Int? {
        guard let text = invocation.value(name) else { return nil }
        guard let value = Int(text), range.contains(value) else {
            throw UsageError(
                "--\(name) must be an integer from \(range.lowerBound) to \(range.upperBound)",
                excerpt: .option(name, text))
        }
        return value
    }

    /// A number of seconds (`1`, `0.5`) in `range`.
    func seconds(_ name: String, range: ClosedRange<Double>) throws(UsageError) -> Double? {
        guard let text = invocation.value(name) else { return nil }
        guard let value = Double(text), value.isFinite, range.contains(value) else {
            throw UsageError(
                "--\(name) must be a number of seconds from \(StatsSummary.decimal(range.lowerBound)) to "
                    + "\(StatsSummary.decimal(range.upperBound))", excerpt: .option(name, text))
        }
        return value
    }

    func rev() throws(UsageError) -> Int64? { try int("rev", range: 1...Int.max).map(Int64.init) }

    func attachment(_ name: String) throws(UsageError) -> BlobAttachment? {
        guard let text = invocation.value(name) else { return nil }
        let parts = text.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false).map(String.init)
        guard parts.count == 2, !parts[0].isEmpty else {
            throw UsageError("--\(name) takes COLLECTION/ID", excerpt: .option(name, text))
        }
        guard let id = UUID(wireString: parts[1]) else {
            let excerpt = UsageError.Excerpt.option(name, text)
            throw UsageError(
                "--\(name)'s ID must be a UUID like 3f2504e0-4f89-11d3-9a0c-0305e82c3301",
                excerpt: UsageError.Excerpt(
                    excerpt.text, offset: excerpt.offset + parts[0].count + 1, length: parts[1].count))
        }
        return BlobAttachment(collection: parts[0], id: id)
    }

    /// `--where`, `--filter`, `--contains` and `--in` as a filter and a text query.
    func query() throws(UsageError) -> (Filter?, TextQuery?) {
        let filter = try FilterSyntax.filter(wheres: invocation.values["where"] ?? [], json: invocation.value("filter"))
        var text: TextQuery?
        if let contains = invocation.value("contains") {
            var fields: [FieldPath]?
            if let list = invocation.value("in") {
                fields = []
                var offset = 0
                for name in list.split(separator: ",", omittingEmptySubsequences: false) {
                    do throws(LarderError) {
                        fields!.append(try FieldPath(name.trimmingCharacters(in: .whitespaces)))
                    } catch {
                        let whole = UsageError.Excerpt.option("in", list)
                        let excerpt = UsageError.Excerpt(whole.text, offset: whole.offset + offset, length: name.count)
                        throw UsageError("--in: \(error.message)", excerpt: excerpt)
                    }
                    offset += name.count + 1
                }
            }
            text = TextQuery(query: contains, fields: fields)
        } else if invocation.value("in") != nil {
            throw UsageError("--in names the fields that --contains searches; add --contains TEXT")
        }
        return (filter, text)
    }
}
