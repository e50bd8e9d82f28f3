import Foundation

/// A list of servers as people write it: `--host a:7411,b:7412` or `LARDER_HOST` with commas, for several
/// larder-servers that share one PostgreSQL. Each item is `host`, `host:port`, `[v6 address]:port` or a bare IPv6
/// address; an item without a port takes `defaultPort`.
package enum HostList {
    /// The servers of `text`, in order; INVALID_ARGUMENT naming the item that is not a host or has a bad port.
    package static func parse(_ text: String, defaultPort: Int) throws(LarderError) -> [(host: String, port: Int)] {
        var servers: [(host: String, port: Int)] = []
        for raw in text.split(separator: ",", omittingEmptySubsequences: false) {
            let item = raw.trimmingCharacters(in: .whitespaces)
            guard !item.isEmpty else {
                throw LarderError(
                    .invalidArgument, "the host list '\(text)' has an empty item; separate hosts with one comma")
            }
            var host = item
            var portText: Substring?
            if item.hasPrefix("[") {
                // [::1]:7411 or [::1]
                guard let close = item.firstIndex(of: "]") else {
                    throw LarderError(.invalidArgument, "'\(item)' opens [ without closing it; write [::1]:7411")
                }
                host = String(item[item.index(after: item.startIndex)..<close])
                let rest = item[item.index(after: close)...]
                if !rest.isEmpty {
                    guard rest.hasPrefix(":") else {
                        throw LarderError(.invalidArgument, "'\(item)': after ] comes :port, as in [::1]:7411")
                    }
                    portText = rest.dropFirst()
                }
            } else if item.filter({ $0 == ":" }).count == 1, let colon = item.firstIndex(of: ":") {
                host = String(item[..<colon])
                portText = item[item.index(after: colon)...]
            }
            guard !host.isEmpty else { throw LarderError(.invalidArgument, "'\(item)' names no host") }
            var port = defaultPort
            if let portText {
                guard let value = Int(portText), (1...65535).contains(value) else {
                    throw LarderError(.invalidArgument, "'\(item)': the port must be an integer from 1 to 65535")
                }
                port = value
            }
            servers.append((host, port))
        }
        return servers
    }
}
