import LarderStore
import LarderWire

/// Tells every shard of each commit, in commit order. Called on the store's writer queue, so it only hands the
/// batch over: filtering, encoding and writing happen on the shards' event loops, and a slow subscriber never holds up a
/// write.
final class WatchHub: Sendable {
    let shards: [Shard]

    init(shards: [Shard]) { self.shards = shards }

    func publish(_ entries: [ChangeEntry]) {
        for shard in shards { shard.publish(entries) }
    }
}
