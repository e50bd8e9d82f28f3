import Foundation
import LarderIO
import LarderSync
import LarderWire

// A client connection's change feed: WATCH registers a sink for pushed events, UNWATCH forgets it.
extension Connection {
    // MARK: - The change feed

    /// Sends WATCH; its answer registers `sink` for the subscription's events on the I/O thread, before any
    /// event can be read.
    func watch(_ json: [UInt8], sink: EventSink, timeout: Duration?) async throws(LarderError) -> Frame {
        try await call(.watch, json: json, binary: [], timeout: timeout, onReply: { [weak self] frame in
            guard let self, frame.status == .ok,
                let response = try? WatchResponse(json: frame.jsonObject())
            else { return }
            if sink.started(response) {
                lock.withLock { subscriptions[response.subscription] = sink }
            } else {
                // Cancelled (or timed out) while the answer was on its way.
                unwatch(response.subscription)
            }
        })
    }

    /// Forgets a subscription and tells the server (UNWATCH), without waiting for its answer.
    func unwatch(_ id: UInt32) {
        let open = lock.withLock { () -> Bool in
            subscriptions[id] = nil
            return failure == nil
        }
        guard open else { return }
        let json = UnwatchRequest(subscription: id).json.bytes
        Task { _ = try? await self.call(.unwatch, json: json, binary: [], timeout: .seconds(30)) }
    }

    /// An EVENT frame, on the I/O thread: to its subscription's stream. Other pushed opcodes (from a later server)
    /// are ignored.
    func deliverEvent(_ frame: Frame) {
        guard frame.opcode == .event, let sink = lock.withLock({ subscriptions[frame.requestID] }),
            let event = try? ChangeEvent(json: frame.jsonObject())
        else { return }
        if !sink.receive(event) {
            lock.withLock {
                if subscriptions[frame.requestID] === sink { subscriptions[frame.requestID] = nil }
            }
        }
    }
}
