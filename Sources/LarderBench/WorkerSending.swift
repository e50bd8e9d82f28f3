#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import CEpoll
import LarderIO

// A worker's sending side: which request goes next, on which connection, and when.
extension Worker {
    /// Sends what the connection may: up to the pipeline depth (closed loop) or what the schedule has made due.
    @inline(__always)
    func fill(_ c: Connection<D>, now: UInt64, interval: UInt64) {
        if phase.openLoop {
            while !c.free.isEmpty && c.nextIntended <= now && c.nextIntended < issueEnd && quotaLeft {
                issue(c, intended: c.nextIntended, now: now)
                c.nextIntended += interval
            }
        } else {
            while !c.free.isEmpty && now < issueEnd && quotaLeft {
                issue(c, intended: now, now: now)
            }
        }
    }

    var quotaLeft: Bool { quota.map { issuedMeasured < $0 } ?? true }

    @inline(__always)
    func issue(_ c: Connection<D>, intended: UInt64, now: UInt64) {
        let request = nextRequest()
        let slot = c.free.removeLast()
        let id = (c.sequence << 10) | UInt32(slot)
        c.sequence &+= 1
        c.driver.encode(request, requestID: id, into: &c.out)
        let measured = intended >= measureStart
        c.slots[slot] = Slot(
            intended: intended, sent: now, key: request.key, id: id, op: request.op, idKind: request.idKind,
            rev: request.rev,
            measured: measured, active: true)
        if D.inOrder {
            c.order[(c.orderHead + c.orderCount) % c.order.count] = slot
            c.orderCount += 1
        }
        c.inflight += 1
        inflight += 1
        if measured { issuedMeasured += 1 }
    }

    func nextRequest() -> Request {
        switch phase.kind {
        case .preloadDocuments: return Request(op: .create, key: nextSequential(), idKind: .preloaded)
        case .preloadBlobs: return Request(op: .blobPut, key: nextSequential(), idKind: .preloaded)
        case .measure: break
        }
        let op = operationTable[Int(rng.below(UInt64(operationTable.count)))]
        switch op {
        case .get, .replace, .patch, .search, .count:
            return Request(op: op, key: nextKey(phase.keyspace, phase.zipf), idKind: .preloaded)
        case .blobGet:
            return Request(op: op, key: nextKey(phase.blobKeyspace, phase.blobZipf), idKind: .preloaded)
        case .delete:
            if let key = deletable.popLast() { return Request(op: .delete, key: key, idKind: .created) }
            createdCounter += 1
            return Request(op: .create, key: createdCounter, idKind: .created)
        case .patchRev:
            if let (key, rev) = revisable.popLast() {
                return Request(op: .patchRev, key: key, idKind: .created, rev: rev)
            }
            createdCounter += 1
            return Request(op: .create, key: createdCounter, idKind: .created)
        case .create, .blobPut:
            createdCounter += 1
            return Request(op: op, key: createdCounter, idKind: .created)
        }
    }

    @inline(__always)
    func nextKey(_ n: UInt64, _ zipf: Zipf?) -> UInt64 {
        switch phase.keys {
        case .uniform: return rng.below(n)
        case .zipf: return zipf!.next(&rng)
        case .sequential: return nextSequential() % n
        }
    }

    /// Worker w of W takes w, w+W, w+2W...: together the workers cover 0, 1, 2... exactly once.
    @inline(__always)
    func nextSequential() -> UInt64 {
        defer { sequential += 1 }
        return sequential &* UInt64(workers) &+ UInt64(index)
    }

    /// Writes pending output; what the socket does not take now waits for POLLOUT.
    func flush(_ c: Connection<D>) {
        guard c.hasOutput else { return }
        if let tls = c.tls {
            do throws(BenchError) {
                try tls.flush(c.fd, &c.out, &c.outOffset)
            } catch {
                broken(c, error.message)
            }
            return
        }
        do throws(BenchError) {
            let offset = c.outOffset
            let outcome = try Sys.call("write") {
                c.out.withUnsafeBytes { write(c.fd, $0.baseAddress! + offset, $0.count - offset) }
            }
            if case .done(let n) = outcome {
                c.outOffset += n
                if c.outOffset == c.out.count {
                    c.out.removeAll(keepingCapacity: c.out.capacity <= 4 << 20)
                    c.outOffset = 0
                }
            }
        } catch {
            broken(c, error.message)
        }
    }
}
