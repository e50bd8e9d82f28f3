#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import CEpoll
import LarderIO

// A worker's receiving side: answers read and matched to their requests, failures, and the per-second samples.
extension Worker {
    func readAnswers(_ c: Connection<D>) {
        while c.alive {
            let carried = c.partial.count
            if carried > 0 {
                c.partial.withUnsafeBytes { readBuffer.copyMemory(from: $0) }
                c.partial.removeAll(keepingCapacity: true)
            }
            let room = readBuffer.count - carried
            let outcome: Sys.Outcome
            do throws(BenchError) {
                let buffer = readBuffer
                if let tls = c.tls {
                    outcome = try tls.read(c.fd, into: UnsafeMutableRawBufferPointer(rebasing: buffer[carried...]))
                } else {
                    outcome = try Sys.call("read") { read(c.fd, buffer.baseAddress! + carried, room) }
                }
            } catch {
                broken(c, error.message)
                return
            }
            guard case .done(let n) = outcome else {
                if carried > 0 {
                    c.partial.append(contentsOf: UnsafeRawBufferPointer(rebasing: readBuffer[0..<carried]))
                }
                return
            }
            if n == 0 {
                broken(c, "the server closed the connection")
                return
            }
            let total = carried + n
            let consumed: Int
            do throws(BenchError) {
                consumed = try c.driver.consume(
                    UnsafeRawBufferPointer(rebasing: readBuffer[0..<total]), into: &completions)
            } catch {
                completeAll(c, now: Sys.now())
                broken(c, error.message)
                return
            }
            if consumed < total {
                c.partial.append(contentsOf: UnsafeRawBufferPointer(rebasing: readBuffer[consumed..<total]))
            }
            completeAll(c, now: Sys.now())
            // The socket is drained; poll says when there is more (but not of what a TLS session already holds).
            if n < room && (c.tls?.hasBufferedInput ?? false) == false { return }
        }
    }

    func completeAll(_ c: Connection<D>, now: UInt64) {
        for (id, code) in completions {
            let slot: Int
            if D.inOrder {
                guard c.orderCount > 0 else {
                    completions.removeAll(keepingCapacity: true)
                    return broken(c, "the server answered a request that was not sent")
                }
                slot = c.order[c.orderHead]
                c.orderHead = (c.orderHead + 1) % c.order.count
                c.orderCount -= 1
            } else {
                slot = Int(id & slotMask)
                guard slot < c.slots.count, c.slots[slot].active, c.slots[slot].id == id else {
                    completions.removeAll(keepingCapacity: true)
                    return broken(c, "the server answered request id \(id), which is not in flight")
                }
            }
            complete(c, slot: slot, code: code, now: now)
        }
        completions.removeAll(keepingCapacity: true)
    }

    @inline(__always)
    func complete(_ c: Connection<D>, slot: Int, code: UInt16, now: UInt64, answered: Bool = true) {
        let s = c.slots[slot]
        c.slots[slot].active = false
        c.free.append(slot)
        c.inflight -= 1
        inflight -= 1
        progressPending += 1
        let ok = code == ResultCode.ok || code == phase.tolerated
        if ok && s.idKind == .created {
            // A document goes to one list: a patch and a delete of it in flight together would collide.
            if s.op == .patchRev {
                revisable.append((s.key, s.rev + 1))
            } else if s.op == .create {
                if tracksRevisions { revisable.append((s.key, 1)) } else { deletable.append(s.key) }
            }
        }
        guard s.measured else { return }
        let op = s.op.rawValue
        stats[op].count += 1
        second.counts[op] += 1
        if !ok {
            stats[op].errorsByCode[code, default: 0] += 1
            second.errors += 1
        }
        guard answered else { return }
        let latency = now &- s.intended
        stats[op].latency.record(latency)
        if phase.openLoop { stats[op].uncorrected.record(now &- s.sent) }
        second.latency.record(latency)
        result.lastCompletion = now
    }

    /// Fails every request in flight with `code` (no answer: no latency is recorded).
    func failInflight(code: UInt16) {
        let now = Sys.now()
        for c in connections { failInflight(c, code: code, now: now) }
    }

    func failInflight(_ c: Connection<D>, code: UInt16, now: UInt64) {
        for slot in c.slots.indices where c.slots[slot].active {
            complete(c, slot: slot, code: code, now: now, answered: false)
        }
        c.orderCount = 0
    }

    func broken(_ c: Connection<D>, _ why: String) {
        guard c.alive else { return }
        c.alive = false
        close(c.fd)
        failInflight(c, code: ResultCode.connectionClosed, now: Sys.now())
        if result.connectionErrors.count < 10 { result.connectionErrors.append(why) }
    }

    func publishSecond(endingAt tick: UInt64) {
        guard tick > measureStart else { return }
        second.second = Int((tick - measureStart) / 1_000_000_000)
        second.duration = 1
        aggregator.publish(second)
        second = SecondSample(second: second.second + 1, duration: 1)
    }
}
