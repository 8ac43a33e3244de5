import CCurl
import Foundation

/// Feeds a request body to libcurl's read callback, from memory or a file region.
struct CurlRequestBody {
    private enum Source {
        case none
        case data(Data)
        case file(fd: Int32, path: String, offset: Int64)
    }

    private var source: Source
    private let length: Int64
    private var position: Int64 = 0
    private(set) var failure: Error?
    private let url: URL

    init(_ body: RequestBody, url: URL) throws {
        self.url = url
        self.length = body.length
        switch body {
        case .none:
            source = .none
        case .data(let data):
            source = .data(data)
        case .file(let path, let offset, _):
            let fd = open(path, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else { throw POSIXFailure(operation: "open", path: path) }
            source = .file(fd: fd, path: path, offset: offset)
        }
    }

    /// Closes the file, if any. Called when the exchange is released.
    func release() {
        if case .file(let fd, _, _) = source { _ = close(fd) }
    }

    mutating func read(into buffer: UnsafeMutableRawBufferPointer) -> Int {
        let wanted = Int(min(Int64(buffer.count), length - position))
        guard wanted > 0 else { return 0 }
        switch source {
        case .none:
            return 0
        case .data(let data):
            let start = data.startIndex + Int(position)
            data.copyBytes(to: buffer.bindMemory(to: UInt8.self), from: start..<(start + wanted))
            position += Int64(wanted)
            return wanted
        case .file(let fd, let path, let offset):
            while true {
                let n = pread(fd, buffer.baseAddress, wanted, off_t(offset + position))
                if n < 0 && errno == EINTR { continue }
                if n <= 0 {
                    failure = n < 0 ? POSIXFailure(operation: "read", path: path)
                        : POSIXFailure(operation: "read (file shrank while uploading)", path: path, code: EIO)
                    return Int(tdc_readfunc_abort)
                }
                position += Int64(n)
                return n
            }
        }
    }

    mutating func seek(to offset: Int64) -> Bool {
        guard offset >= 0 && offset <= length else { return false }
        position = offset
        return true
    }
}
