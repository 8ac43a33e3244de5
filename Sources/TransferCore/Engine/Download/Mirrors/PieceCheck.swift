import Foundation

/// Checks a complete file against a metalink's piece hashes (`PieceHashes`): which pieces are wrong.
/// Read with `pread` from the download's own descriptor, one piece at a time (a piece is at most 1 GiB;
/// it is read a MiB at a time).
enum PieceCheck {
    /// The indices of the pieces whose digest differs, in order. A file whose size needs another number
    /// of pieces than listed fails as a whole (every listed piece): the list is for another file.
    /// - Parameter only: the pieces to check (nil: every one).
    static func failing(fd: Int32, size: Int64, pieces: PieceHashes, path: String, only: Range<Int>? = nil) throws -> [Int] {
        let needed = size == 0 ? 0 : Int((size - 1) / max(1, pieces.length)) + 1
        guard needed == pieces.hashes.count else { return Array(pieces.hashes.indices) }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { buffer.deallocate() }
        var failing: [Int] = []
        for index in (only ?? pieces.hashes.indices).clamped(to: pieces.hashes.indices) {
            let range = pieces.range(of: index, size: size)
            var digest = Digest(pieces.algorithm == .sha1 ? .sha1 : .sha256)
            var offset = range.lowerBound
            while offset < range.upperBound {
                let want = Int(min(Int64(buffer.count), range.upperBound - offset))
                let count = pread(fd, buffer.baseAddress, want, off_t(offset))
                if count < 0 {
                    if errno == EINTR { continue }
                    throw POSIXFailure(operation: "read", path: path)
                }
                // A file shorter than its plan: the rest of the piece is missing, so it is wrong.
                if count == 0 { break }
                digest.update(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
                offset += Int64(count)
            }
            let value = digest.finalize()
            if offset < range.upperBound || value != pieces.hashes[index] { failing.append(index) }
        }
        return failing
    }
}
