#if canImport(CEpoll)
import CEpoll
#endif

extension LarderServer {
    /// The size from which glibc's malloc maps each allocation on its own and unmaps it when freed.
    public static let mapThresholdBytes: Int32 = 4 << 20

    /// Makes every allocation of `mapThresholdBytes` or more a mapping of its own, returned to the system when freed.
    /// glibc otherwise raises that threshold (up to 32 MiB) after the first large free, and a thumbnail's decode
    /// buffers (tens of megabytes for a photo decoded whole) then land in the arena of whichever work-pool thread ran
    /// it, where they stay resident after the decode: the server's memory grew with each thread that had made one.
    /// Call it at the start of `main`, before any thread allocates.
    public static func returnLargeAllocationsToTheSystem() {
        #if canImport(CEpoll)
        _ = larder_set_malloc_map_threshold(mapThresholdBytes)
        #endif
    }
}
