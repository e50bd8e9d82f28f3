import Foundation
import LarderTestThreads
import LarderWire
import Testing

@testable import LarderServer

@Suite(.ownThreads, .timeLimit(.minutes(20))) struct DataDirectoryMessageTests {
    @Test func aFileInTheWayIsNamed() throws {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("larder-file-\(UUID().uuidString)").path
        _ = FileManager.default.createFile(atPath: file, contents: Data("x".utf8))
        defer { try? FileManager.default.removeItem(atPath: file) }
        #expect(LarderServer.whyNotCreatable(file + "/data/deeper") == "\(file) is a file, not a directory")
        var configuration = ServerConfiguration()
        configuration.dataDirectory = file + "/data"
        configuration.port = 0
        #expect {
            _ = try LarderServer(configuration: configuration)
        } throws: { error in
            let message = (error as? LarderError)?.message ?? ""
            return message.contains("is a file, not a directory") && message.contains("--data-dir")
        }
    }
}
