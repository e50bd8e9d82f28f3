#if os(Linux) && !LARDER_PORTABLE
import CEpoll
#endif

/// Starts writing `count` bytes of file `fd` from `offset` back to disk, without waiting for them (Linux's
/// `sync_file_range(SYNC_FILE_RANGE_WRITE)`; nothing elsewhere). A file written front to back and fsynced at the end
/// then pays at the end only for the bytes written since the last call, not for all of them: the disk works while
/// the rest arrives. Durability still comes from that final fsync alone; a failure here changes nothing and is ignored.
public func startWriteback(_ fd: Int32, offset: Int64, count: Int) {
    #if os(Linux) && !LARDER_PORTABLE
    _ = larder_start_writeback(fd, offset, Int64(count))
    #endif
}
