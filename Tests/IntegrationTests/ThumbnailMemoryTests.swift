import Foundation
import LarderClient
import LarderTestProcess
import LarderTestSupport
import LarderTestThreads
import Testing

/// What thumbnails of hostile photos cost a real `larder-server` process in memory: photos that libjpeg must decode
/// whole (sequential, one scan per component), at the pixel limit and at the largest size still admitted, their last
/// scan cut so that no thumbnail is ever cached and every request decodes again.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct ThumbnailMemoryTests {
    /// 16 clients, each with 4 requests in flight, ask for thumbnails of a 10,000 × 10,000 photo in three scans (one
    /// decode of it would hold 600 MB of coefficients) and of 25-megapixel 4:2:0 and 12.5-megapixel 4:4:4 ones in
    /// several scans (75 MB each, the most admitted). The first is refused from its header, the others are decoded
    /// at most `--thumbnail-threads` at a time, and the server's peak resident memory stays under 300 MB above idle
    /// with two of them. With one, it stays under 130 MB: two decodes at once (150 MB of coefficients) would cross it.
    @Test(arguments: [(threads: 1, boundMiB: 130), (threads: 2, boundMiB: 300)])
    func hostilePhotosDecodedWholeStayUnderTheMemoryBound(_ setting: (threads: Int, boundMiB: Int)) async throws {
        let directory = ServerProcessTests.temporaryDirectory().path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let server = try ServerChild(dataDirectory: directory, arguments: ["--thumbnail-threads", String(setting.threads)])
        defer {
            _ = server.stop()
            try? FileManager.default.removeItem(atPath: server.logPath)
        }
        let uploader = LarderClient(port: server.port)
        defer { uploader.close() }
        let huge = flatJPEG(width: 10_000, height: 10_000, scanPerComponent: true, cutLastScan: true)
        let admitted420 = flatJPEG(
            width: 5_000, height: 5_000, sampling: [(2, 2), (1, 1), (1, 1)], scanPerComponent: true,
            cutLastScan: true)
        let admitted444 = flatJPEG(width: 3_535, height: 3_535, scanPerComponent: true, cutLastScan: true)
        var stored: [UUID] = []
        for photo in [huge, admitted420, admitted444] { stored.append(try await uploader.blobPut(Data(photo)).id) }
        let ids = stored
        let idle = try #require(server.residentBytes, "the server's /proc/PID/status must be readable")

        let answers = try await withThrowingTaskGroup(of: [Status].self) { group in
            for _ in 0..<16 {
                group.addTask {
                    // 64 decodes one or two at a time take minutes in a sanitized build on a busy machine.
                    let client = LarderClient(port: server.port, requestTimeout: .seconds(900))
                    defer { client.close() }
                    return try await withThrowingTaskGroup(of: Status.self) { requests in
                        for round in 0..<4 {
                            requests.addTask {
                                do {
                                    _ = try await client.thumbnail(ids[round % ids.count], maxSide: 64)
                                    return .ok
                                } catch let error as LarderError {
                                    return error.status
                                }
                            }
                        }
                        var statuses: [Status] = []
                        for try await status in requests { statuses.append(status) }
                        return statuses
                    }
                }
            }
            var all: [Status] = []
            for try await statuses in group { all += statuses }
            return all
        }
        let peak = try #require(server.peakResidentBytes)
        // 16 × 4 requests: a third of the photos refused from the header, the rest decoded and refused at the cut.
        #expect(answers.count == 64)
        #expect(answers.filter { $0 == .payloadTooLarge }.count == 32, "\(answers)")
        #expect(answers.filter { $0 == .unsupportedMediaType }.count == 32, "\(answers)")
        let above = peak - idle
        #expect(above < SanitizerBuild.current.residentBound(setting.boundMiB << 20), "peak \(peak >> 20) MiB, idle \(idle >> 20) MiB")
        // The bound is not met by doing nothing: the decodes really held their coefficients.
        #expect(above > 40 << 20, "peak \(peak >> 20) MiB, idle \(idle >> 20) MiB")
        let counts = try await ThumbnailServerTests.thumbnailStats(uploader)
        #expect(counts.made == 0 && counts.stored == 0)
    }
}
