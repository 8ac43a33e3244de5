import Foundation

/// The control API's bearer token: from `--api-token-file`, or the queue's own
/// `.transferd/api.token`, made once (32 random bytes, hex, mode 0600) and kept,
/// so every run and every worker serving from one folder takes the same token.
package struct APIToken: Sendable {
    package let value: String
    /// Where it came from, for the message that tells a user where to find it.
    package let path: String

    /// The token in `path`, which must be the user's own: a regular file others cannot read.
    package static func read(from path: String) throws -> APIToken {
        let data: Data
        do {
            data = try QueueIngestor.readRegularFile(path, limit: 4096)
        } catch {
            throw APITokenError(description: "--api-token-file \(path): \(error)")
        }
        var info = stat()
        if stat(path, &info) == 0 && info.st_mode & 0o077 != 0 {
            throw APITokenError(description: "--api-token-file \(path) can be read by other users; run chmod 600 \(path)")
        }
        let token = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard token.count >= 16, token.allSatisfy({ $0.isASCII && !$0.isWhitespace }) else {
            throw APITokenError(description: "--api-token-file \(path): the token must be at least 16 characters with no spaces"
                                + " (openssl rand -hex 32 makes one)")
        }
        return APIToken(value: token, path: path)
    }

    /// The queue's token, made if it is missing.
    package static func queueToken(in layout: QueueLayout) throws -> APIToken {
        let path = (layout.stateDirectory as NSString).appendingPathComponent("api.token")
        // Only a missing file is made anew: one that cannot be read, or that others can read, is
        // the user's to mend (replacing it would lock out every client that holds the old token).
        if access(path, F_OK) == 0 || errno != ENOENT {
            do {
                return try read(from: path)
            } catch {
                throw APITokenError(description: "\(error)".replacingOccurrences(of: "--api-token-file ", with: "")
                                    + "; or delete \(path) to have a new token made")
            }
        }
        var bytes = [UInt8](repeating: 0, count: 32)
        var generator = SystemRandomNumberGenerator()
        for index in bytes.indices { bytes[index] = generator.next() }
        let token = bytes.map { String(format: "%02x", $0) }.joined()
        // Written beside, then linked into place: a reader never sees half a token.
        let temporary = path + ".\(getpid()).tmp"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw POSIXFailure(operation: "create", path: temporary) }
        let text = Array((token + "\n").utf8)
        let written = text.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        let synced = fsync(fd) == 0
        close(fd)
        defer { unlink(temporary) }
        guard written == text.count, synced else { throw POSIXFailure(operation: "write", path: temporary) }
        // link() fails if the file appeared meanwhile (another run made one first): that one is the token.
        if link(temporary, path) != 0 {
            guard errno == EEXIST else { throw POSIXFailure(operation: "create", path: path) }
            return try read(from: path)
        }
        return APIToken(value: token, path: path)
    }

    /// Whether `candidate` is the token, in time that does not depend on where they differ.
    package func matches(_ candidate: String) -> Bool {
        let expected = Array(value.utf8)
        let given = Array(candidate.utf8)
        var difference = UInt8(expected.count == given.count ? 0 : 1)
        for index in expected.indices { difference |= expected[index] ^ (index < given.count ? given[index] : 0) }
        return difference == 0
    }
}

package struct APITokenError: Error, CustomStringConvertible {
    package let description: String
}
