import CLinux

/// glibc's heap. A free in the middle of the heap is kept by the allocator (only the top is
/// given back by itself): after parsing or writing a large state, hundreds of KiB of free
/// pages stay dirty in the process until `malloc_trim` hands them back to the kernel.
public enum Heap {
    /// `malloc_trim(0)`: gives every whole free page of the heap back to the kernel
    /// (`MADV_DONTNEED`). Returns whether any memory was released.
    @discardableResult
    public static func trim() -> Bool { malloc_trim(0) != 0 }
}
