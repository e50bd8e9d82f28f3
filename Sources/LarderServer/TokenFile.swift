import Foundation
import LarderStore
import LarderSync
import LarderWire
import Synchronization

/// The token file (`--token-file`), and the table in force, which SIGHUP replaces.
extension TokenTable {
    /// Parses a token file: one `ROLE TOKEN [COLLECTION,...]` per line; blank lines and lines starting with `#` are
    /// skipped. Errors name the line and what is wrong, never the token.
    package static func parse(_ text: String, path: String) throws(ConfigurationError) -> TokenTable {
        func fail(_ line: Int, _ message: String) -> ConfigurationError {
            ConfigurationError(message: "the token file \(path), line \(line): \(message)")
        }
        var table = TokenTable()
        var lineNumbers: [Int] = []
        for (index, rawLine) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let number = index + 1
            let line = rawLine.trimmingCharacters(in: .whitespacesAndNewlines)
            if line.isEmpty || line.hasPrefix("#") { continue }
            let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init)
            guard fields.count == 2 || fields.count == 3 else {
                throw fail(
                    number, "has \(fields.count) field\(fields.count == 1 ? "" : "s"); each line is ROLE TOKEN "
                        + "[COLLECTION,...] (write 'admin TOKEN' for one token with every right)")
            }
            guard let role = Role(name: fields[0]) else {
                throw fail(number, "the first field must be the role: read, write or admin")
            }
            let token = Array(fields[1].utf8)
            guard token.count <= maxTokenBytes else {
                throw fail(number, "the token is \(token.count) bytes; at most \(maxTokenBytes) are allowed")
            }
            if let earlier = table.entries.firstIndex(where: { $0.token == token }) {
                throw fail(number, "repeats the token of line \(lineNumbers[earlier]); give each token one line")
            }
            var collections: Set<String>?
            if fields.count == 3 {
                var names = Set<String>()
                for name in fields[2].split(separator: ",", omittingEmptySubsequences: false).map(String.init) {
                    do throws(LarderError) {
                        try CollectionName.validate(name)
                    } catch {
                        throw fail(number, "'\(name)' is not a collection name: \(error.message)")
                    }
                    names.insert(name)
                }
                collections = names
            }
            table.entries.append(Entry(token: token, grant: Grant(role: role, collections: collections)))
            lineNumbers.append(number)
        }
        guard !table.isEmpty else { throw ConfigurationError(message: "the token file \(path) holds no token") }
        return table
    }

    /// Reads and parses the token file at `path`.
    package static func load(path: String) throws(ConfigurationError) -> TokenTable {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ConfigurationError(message: "cannot read the token file \(path)")
        }
        return try parse(String(decoding: data, as: UTF8.self), path: path)
    }
}

/// The token table in force, shared by every event loop and replaced whole on SIGHUP. A connection checks the
/// generation on each request and, when it changed, looks its token up again: a revoked token stops working at the
/// next request, and a changed grant applies from then on.
package final class Tokens: TokenSource {
    private let state: Locked<(table: TokenTable, generation: Int)>
    /// A copy of the generation that a request reads without the lock.
    private let published = Atomic<Int>(0)

    package init(_ table: TokenTable) {
        state = Locked((table, 0))
    }

    package var current: (table: TokenTable, generation: Int) { state.withLock { $0 } }

    package var generation: Int { published.load(ordering: .acquiring) }

    package func replace(with table: TokenTable) {
        state.withLock {
            $0.table = table
            $0.generation += 1
            published.store($0.generation, ordering: .releasing)
        }
    }
}
