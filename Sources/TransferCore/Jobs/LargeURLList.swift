import Foundation

/// A URL list too large to read whole (`.urls` over `JobFileParser.largeListSize`, up to
/// `JobFileParser.maxListSize`): read from its open descriptor a piece at a time, so
/// ingesting a list of a million URLs holds a piece and a batch of jobs in memory, not the
/// file and its million jobs.
///
/// Opening it reads it once (its SHA-256, that it is UTF-8 without NUL, how many job lines
/// it has); `forEachBatch` parses it again, line by line with the rules of a small list,
/// and hands its jobs on in batches. A mistake is known only when the parse reaches it, so
/// the batches before it have been handed on: the store records them inside the file's own
/// savepoint and drops them when `forEachBatch` throws the rejection at the end.
package final class LargeURLList: Sendable {
    package let name: String
    package let contentHash: String
    /// Lines that are not blank and not comments: one job each in a valid list.
    package let jobCount: Int
    private let descriptor: Int32
    private let parser: JobFileParser
    /// Bytes read at a time.
    private let pieceSize: Int

    /// Takes `descriptor` (an open regular file), which it closes when it goes.
    init(name: String, descriptor: Int32, parser: JobFileParser, pieceSize: Int = 1 << 20) throws(JobFileRejection) {
        self.name = name
        self.descriptor = descriptor
        self.parser = parser
        self.pieceSize = pieceSize
        var hasher = SHA256Hasher()
        var jobs = 0
        var blank = true
        do {
            try Self.forEachLine(descriptor, name: name, pieceSize: pieceSize, hashing: &hasher) { line, _ in
                let trimmed = line.trimmingSpaces()
                if !trimmed.isEmpty { blank = false }
                if !trimmed.isEmpty && !trimmed.hasPrefix("#") { jobs += 1 }
            }
        } catch let rejection as JobFileRejection {
            close(descriptor)
            throw rejection
        } catch {
            close(descriptor)
            throw Self.rejection(name, "could not be read: \(error)", fix: "make it a readable regular file")
        }
        contentHash = hasher.finalizeHex()
        jobCount = jobs
        guard !blank else {
            close(descriptor)
            throw Self.rejection(name, "the file is empty", fix: "write one URL per line")
        }
    }

    deinit { close(descriptor) }

    /// The list's jobs, `size` at a time and in order, each with the id and destination a
    /// small list would give it. Throws the list's rejection once the whole list is read
    /// when a line has a mistake (from then on no batch is handed on), or when the file's
    /// bytes are no longer the ones opened.
    package func forEachBatch(of size: Int, _ body: ([JobSpec]) throws -> Void) throws {
        let stem = ((name as NSString).lastPathComponent as NSString).deletingPathExtension
        var context = Context(file: name, idStem: stem, contentHash: contentHash, root: parser.root,
                              queueDirectory: parser.queueDirectory)
        context.allowsCommands = parser.allowsCommands
        context.destinationsByDigest = true
        var batch: [JobSpec] = []
        batch.reserveCapacity(size)
        var hasher = SHA256Hasher()
        try Self.forEachLine(descriptor, name: name, pieceSize: pieceSize, hashing: &hasher) { line, number in
            guard let job = context.parseListLine(line[...], number: number), context.errors.isEmpty else { return }
            batch.append(job)
            if batch.count >= size {
                try body(batch)
                batch.removeAll(keepingCapacity: true)
            }
        }
        if context.listedJobs == 0 && context.errors.isEmpty {
            context.fail(nil, nil, nil, "the list has no URLs", fix: "write one URL per line")
        }
        guard context.errors.isEmpty else { throw JobFileRejection(errors: context.errors) }
        guard hasher.finalizeHex() == contentHash else {
            throw Self.rejection(name, "changed while it was being read",
                                 fix: "write the list under another name, then rename it into the queue folder")
        }
        if !batch.isEmpty { try body(batch) }
    }

    private static func rejection(_ name: String, _ message: String, fix: String) -> JobFileRejection {
        JobFileRejection(errors: [JobFileError(file: name, message: message, fix: fix)])
    }

    /// Every line of the file from its first byte, numbered from 1, split where
    /// `JobFileParser.lines` splits a whole text (a separator across two pieces included),
    /// each checked to be UTF-8 without NUL; the bytes go through `hasher` as read.
    private static func forEachLine(_ descriptor: Int32, name: String, pieceSize: Int, hashing hasher: inout SHA256Hasher,
                                    _ body: (String, Int) throws -> Void) throws {
        var pending: [UInt8] = []      // the start of a line the last piece did not end
        var scanned = 0                 // how much of `pending` holds no separator
        var piece = [UInt8](repeating: 0, count: pieceSize)
        var offset: Int64 = 0
        var number = 0
        func emit(_ bytes: ArraySlice<UInt8>) throws {
            number += 1
            // Decoding is lossless exactly when the bytes are UTF-8. (Not Foundation's decoder: it
            // drops a byte order mark at the start of every line, where a whole file loses only its first.)
            var line = String(decoding: bytes, as: UTF8.self)
            guard !bytes.contains(0), line.utf8.elementsEqual(bytes) else {
                throw rejection(name, "line \(number) is not UTF-8 text (binary data?)", fix: "job files are JSON or URL lists")
            }
            if number == 1 && line.unicodeScalars.first == "\u{FEFF}" { line.unicodeScalars.removeFirst() }
            try body(line, number)
        }
        while true {
            let count = piece.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress, $0.count, off_t(offset)) }
            if count < 0 && errno == EINTR { continue }
            guard count >= 0 else {
                throw rejection(name, "could not be read: \(POSIXFailure(operation: "read", path: name))",
                                fix: "make it a readable regular file")
            }
            let atEnd = count == 0
            offset += Int64(count)
            piece.withUnsafeBytes { hasher.update(UnsafeRawBufferPointer(rebasing: $0[0..<count])) }
            pending.append(contentsOf: piece[0..<count])
            var start = 0
            var index = scanned
            // A separator's width at `index`, or nil when the bytes read so far cannot tell.
            func separator() -> Int?? {
                func byte(_ ahead: Int) -> UInt8?? {
                    index + ahead < pending.count ? .some(pending[index + ahead]) : (atEnd ? .some(nil) : nil)
                }
                switch pending[index] {
                case 0x0A, 0x0B, 0x0C: return 1
                case 0x0D:
                    guard let next = byte(1) else { return nil }
                    return next == 0x0A ? 2 : 1
                case 0xC2:
                    guard let next = byte(1) else { return nil }
                    return next == 0x85 ? 2 : .some(nil)
                case 0xE2:
                    guard let second = byte(1) else { return nil }
                    guard second == 0x80 else { return .some(nil) }
                    guard let third = byte(2) else { return nil }
                    return third == 0xA8 || third == 0xA9 ? 3 : .some(nil)
                default: return .some(nil)
                }
            }
            scan: while index < pending.count {
                // Most bytes start no separator: skip them in one tight loop.
                index = pending.withUnsafeBufferPointer { bytes in
                    var at = index
                    while at < bytes.count {
                        let byte = bytes[at]
                        if byte <= 0x0D && byte >= 0x0A || byte == 0xC2 || byte == 0xE2 { break }
                        at += 1
                    }
                    return at
                }
                guard index < pending.count else { break scan }
                switch separator() {
                case .none: break scan                     // wait for the next piece
                case .some(.none): index += 1
                case .some(.some(let width)):
                    try emit(pending[start..<index])
                    index += width
                    start = index
                }
            }
            pending.removeSubrange(0..<start)
            scanned = index - start
            // A line as long as a whole small list may be is a mistake, not a URL; the
            // bound keeps a file without line breaks from filling the memory.
            guard pending.count <= JobFileParser.maxFileSize else {
                throw rejection(name, "line \(number + 1) is longer than \(JobFileParser.maxFileSize) bytes",
                                fix: "write one URL per line")
            }
            if atEnd {
                try emit(pending[...])
                return
            }
        }
    }
}
