import Foundation
import LarderWire

// Photos of a replica's records: a photo added offline is copied into the replica's folder (`<file>.photos`) and
// queued in the outbox behind the record's writes, then uploaded with the resumable upload and attached to its record
// when a server answers. Photos and thumbnails read from the server are kept in the same folder, up to
// `LarderReplica.Configuration.photoCacheBytes`, the least recently used going first; a photo waiting to be uploaded
// is never dropped.

extension ReplicaCollection {
    /// Attaches the JPEG in `file` to record `id`: copied into the replica's folder at once (the original may go),
    /// and uploaded and attached when a server answers, after the record's own queued writes. The answer is the
    /// photo's blob id, which `photo(_:)` reads at once, online or not.
    ///
    /// - Throws: `NOT_FOUND` when the replica does not hold `id`; `INVALID_ARGUMENT` when `file` cannot be read or
    ///   copied; `UNSUPPORTED_MEDIA_TYPE` for a file that does not start like a JPEG; `INTERNAL` when the replica's
    ///   file fails. The server's own refusal (a photo over its limits) comes later, on `LarderReplica.refusals()`.
    public func attachPhoto(contentsOf file: URL, to id: UUID) throws(LarderError) -> UUID {
        let bytes: Data
        do {
            bytes = try Data(contentsOf: file)
        } catch {
            throw LarderError(.invalidArgument, "cannot read the photo \(file.path): \(error)", field: "file")
        }
        guard bytes.count > 2, bytes[bytes.startIndex] == 0xFF, bytes[bytes.startIndex + 1] == 0xD8 else {
            throw LarderError(.unsupportedMediaType, "\(file.path) is not a JPEG; only JPEG photos are stored")
        }
        let blob = UUID()
        let copy = replica.photoURL(blob)
        do {
            try FileManager.default.createDirectory(
                at: copy.deletingLastPathComponent(), withIntermediateDirectories: true)
            try bytes.write(to: copy, options: .atomic)
        } catch {
            throw LarderError(
                .invalidArgument, "cannot copy the photo into \(copy.path): \(error)", field: "file")
        }
        do throws(LarderError) {
            _ = try replica.store.write(name, id, .photo, ["blob": .string(blob.wireString)]) { db throws(LarderError) in
                try db.run(
                    "INSERT INTO photos (blob, collection, id, kind, bytes, pending, used) VALUES (?1, ?2, ?3, 'photo', "
                        + "?4, 1, ?5)",
                    [.text(blob.wireString), .text(name), .text(id.wireString), .int(Int64(bytes.count)),
                     .int(Timestamp.milliseconds(Date()))])
            }
        } catch {
            try? FileManager.default.removeItem(at: copy)
            throw error
        }
        replica.queued(name)
        return blob
    }

    /// The photos added to record `id` through this replica that wait to be uploaded, in the order added.
    ///
    /// - Throws: `INTERNAL` when the replica's file fails.
    public func pendingPhotos(of id: UUID) throws(LarderError) -> [UUID] {
        try replica.store.locked { db throws(LarderError) in
            try db.query(
                "SELECT blob FROM photos WHERE collection = ?1 AND id = ?2 AND pending = 1 ORDER BY used",
                [.text(name), .text(id.wireString)]) { UUID(uuidString: $0[0].text ?? "") }.compactMap { $0 }
        }
    }

    /// The bytes of photo `blob`: the replica's copy when it has one (a photo added here, or read before and still
    /// in the cache), else read from the server and kept in the cache.
    ///
    /// - Throws: `NOT_FOUND` when the server has no such photo; `UNAVAILABLE` when the replica has no copy and no
    ///   server answers; the errors of `LarderClient.blobGet` otherwise.
    public func photo(_ blob: UUID) async throws(LarderError) -> Data {
        try await replica.cachedPhoto(blob, kind: "photo") { () throws(LarderError) -> Data in
            try await replica.client.blobGet(blob).bytes
        }
    }

    /// A thumbnail of photo `blob` whose longer side is `maxSide` (a size the server announces), from the cache, or
    /// made by the server and kept in the cache.
    ///
    /// - Throws: the errors of `LarderClient.thumbnail` when the cache has none.
    public func thumbnail(_ blob: UUID, maxSide: Int) async throws(LarderError) -> Data {
        try await replica.cachedPhoto(blob, kind: "thumbnail-\(maxSide)") { () throws(LarderError) -> Data in
            try await replica.client.thumbnail(blob, maxSide: maxSide).bytes
        }
    }
}

extension LarderReplica {
    /// Where the replica keeps photo `blob` (`kind`: `photo`, or a thumbnail's size).
    func photoURL(_ blob: UUID, kind: String = "photo") -> URL {
        URL(fileURLWithPath: path + ".photos").appendingPathComponent("\(blob.wireString)-\(kind).jpg")
    }

    /// How many bytes of photos and thumbnails read from the server (or uploaded) the replica keeps now; photos
    /// waiting to be uploaded are not counted.
    ///
    /// - Throws: `INTERNAL` when the replica's file fails.
    public func cachedPhotoBytes() throws(LarderError) -> Int {
        try store.locked { db throws(LarderError) in
            Int(try db.query("SELECT coalesce(sum(bytes), 0) FROM photos WHERE pending = 0") { $0[0].int ?? 0 }.first ?? 0)
        }
    }

    /// The cached copy of `blob`'s `kind`, its use noted; or `fetch`'s answer, kept, the least recently used copies
    /// dropped past the cache's size.
    func cachedPhoto(_ blob: UUID, kind: String, fetch: () async throws(LarderError) -> Data) async throws(LarderError)
        -> Data
    {
        let key = kind == "photo" ? blob.wireString : "\(blob.wireString)/\(kind)"
        let url = photoURL(blob, kind: kind)
        let known = try store.locked { db throws(LarderError) in
            try db.run(
                "UPDATE photos SET used = ?2 WHERE blob = ?1", [.text(key), .int(Timestamp.milliseconds(Date()))])
            return try db.query("SELECT 1 FROM photos WHERE blob = ?1", [.text(key)]) { _ in true }.first ?? false
        }
        if known, let data = try? Data(contentsOf: url) { return data }
        let data = try await asOwner(fetch)
        try? FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        guard (try? data.write(to: url, options: .atomic)) != nil else { return data }
        let evicted = try store.locked { db throws(LarderError) -> [String] in
            try db.run(
                "INSERT OR REPLACE INTO photos (blob, collection, id, kind, bytes, pending, used) VALUES (?1, NULL, "
                    + "NULL, ?2, ?3, 0, ?4)",
                [.text(key), .text(kind), .int(Int64(data.count)), .int(Timestamp.milliseconds(Date()))])
            return try evictPhotos(db)
        }
        for name in evicted { try? FileManager.default.removeItem(at: URL(fileURLWithPath: name)) }
        return data
    }

    /// Drops the least recently used copies past `photoCacheBytes` from the table; the files to remove.
    func evictPhotos(_ db: ReplicaDatabase) throws(LarderError) -> [String] {
        var total = try db.query("SELECT coalesce(sum(bytes), 0) FROM photos WHERE pending = 0") { $0[0].int ?? 0 }
            .first ?? 0
        var files: [String] = []
        guard total > Int64(configuration.photoCacheBytes) else { return [] }
        let rows = try db.query("SELECT blob, kind, bytes FROM photos WHERE pending = 0 ORDER BY used") {
            ($0[0].text ?? "", $0[1].text ?? "photo", $0[2].int ?? 0)
        }
        for (key, kind, bytes) in rows where total > Int64(configuration.photoCacheBytes) {
            try db.run("DELETE FROM photos WHERE blob = ?1", [.text(key)])
            total -= bytes
            if let blob = UUID(uuidString: String(key.prefix(36))) { files.append(photoURL(blob, kind: kind).path) }
        }
        return files
    }

    /// Uploads a queued photo and attaches it to its record (the resumable upload: a try after a break, or after
    /// the app started again, goes on where the server stands); once stored, it joins the cache.
    func sendPhoto(_ write: OutboxWrite) async throws(LarderError) {
        guard case .string(let text)? = write.body?["blob"], let blob = UUID(uuidString: text) else {
            try store.dropWrite(write)
            return
        }
        let url = photoURL(blob)
        do throws(LarderError) {
            do throws(LarderError) {
                _ = try await client.putBlob(
                    contentsOf: url, id: blob, attachTo: BlobAttachment(collection: write.collection, id: write.id),
                    resumeWithin: configuration.maxRetryDelay)
            } catch where error.status == .conflict {
                // The id is taken: by this photo, stored before an answer was lost (or the app was killed).
                let info = try await client.blobHead(blob)
                let local = SHA256.hex(Array((try? Data(contentsOf: url)) ?? Data()))
                guard info.sha256 == local else { throw error }
            }
        } catch where !LarderReplica.isTransient(error) {
            try store.dropWrite(write)
            try? store.locked { db throws(LarderError) in try db.run("DELETE FROM photos WHERE blob = ?1", [.text(blob.wireString)]) }
            try? FileManager.default.removeItem(at: url)
            changed(write.collection)
            refused(ReplicaRefusal(collection: write.collection, id: write.id, operation: .photo, error: error))
            return
        }
        let evicted = try store.locked { db throws(LarderError) -> [String] in
            try db.transaction(durable: false) { () throws(LarderError) -> [String] in
                try db.run("DELETE FROM outbox WHERE position = ?1", [.int(write.position)])
                try db.run(
                    "UPDATE photos SET pending = 0, used = ?2 WHERE blob = ?1",
                    [.text(blob.wireString), .int(Timestamp.milliseconds(Date()))])
                try store.rebuild(db, write.collection, write.id)
                return try evictPhotos(db)
            }
        }
        for name in evicted { try? FileManager.default.removeItem(at: URL(fileURLWithPath: name)) }
        changed(write.collection)
    }
}

extension ReplicaStore {
    /// One queued write out of the outbox (a photo refused, or one whose entry is damaged), the view rebuilt.
    func dropWrite(_ write: OutboxWrite) throws(LarderError) {
        try locked { db throws(LarderError) in
            try db.transaction { () throws(LarderError) in
                try db.run("DELETE FROM outbox WHERE position = ?1", [.int(write.position)])
                try rebuild(db, write.collection, write.id)
            }
        }
    }
}
