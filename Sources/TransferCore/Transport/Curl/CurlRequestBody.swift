import CCurl
import Foundation

/// Feeds a request body to libcurl's read callback: memory pieces and file
/// regions one after another, read with `pread` as curl asks, so a body of
/// any size is sent in constant memory. Seeking (curl rewinds a body to
/// resend it after a redirect or an auth challenge) is supported.
struct CurlRequestBody {
    private enum Source {
        case data(Data)
        case file(fd: Int32, path: String, offset: Int64)
    }

    private var pieces: [(source: Source, start: Int64, length: Int64)] = []
    private let length: Int64
    private var position: Int64 = 0
    private(set) var failure: Error?

    init(_ body: RequestBody, url: URL) throws {
        var start: Int64 = 0
        var opened: [Int32] = []
        do {
            for part in body.parts {
                switch part {
                case .data(let data):
                    pieces.append((.data(data), start, Int64(data.count)))
                case .file(let path, let offset, let length):
                    let fd = open(path, O_RDONLY | O_CLOEXEC)
                    guard fd >= 0 else { throw POSIXFailure(operation: "open", path: path) }
                    opened.append(fd)
                    pieces.append((.file(fd: fd, path: path, offset: offset), start, length))
                }
                start += part.length
            }
        } catch {
            for fd in opened { close(fd) }
            throw error
        }
        length = start
    }

    /// Closes the files. Called when the exchange is released.
    func release() {
        for piece in pieces {
            if case .file(let fd, _, _) = piece.source { close(fd) }
        }
    }

    mutating func read(into buffer: UnsafeMutableRawBufferPointer) -> Int {
        var filled = 0
        while filled < buffer.count && position < length {
            guard let piece = pieces.last(where: { $0.start <= position }) else { break }
            let within = position - piece.start
            let wanted = Int(min(Int64(buffer.count - filled), piece.length - within))
            if wanted <= 0 { break }
            let target = buffer.baseAddress! + filled
            switch piece.source {
            case .data(let data):
                let from = data.startIndex + Int(within)
                data.copyBytes(to: target.assumingMemoryBound(to: UInt8.self), from: from..<(from + wanted))
                filled += wanted
                position += Int64(wanted)
            case .file(let fd, let path, let offset):
                let n = pread(fd, target, wanted, off_t(offset + within))
                if n < 0 && errno == EINTR { continue }
                if n <= 0 {
                    failure = n < 0 ? POSIXFailure(operation: "read", path: path)
                        : POSIXFailure(operation: "read (file shrank while uploading)", path: path, code: EIO)
                    return Int(tdc_readfunc_abort)
                }
                filled += n
                position += Int64(n)
            }
        }
        return filled
    }

    mutating func seek(to offset: Int64) -> Bool {
        guard offset >= 0 && offset <= length else { return false }
        position = offset
        return true
    }
}
