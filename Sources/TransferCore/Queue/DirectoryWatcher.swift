// Linux's Dispatch does not mark its sources Sendable; a source is safe to cancel from any thread.
@preconcurrency import Dispatch
import Foundation

/// Calls back when a file is finished in a folder (written and closed, or
/// renamed in): inotify on Linux, a 2-second poll elsewhere.
final class DirectoryWatcher: Sendable {
    private let source: DispatchSourceProtocol

    init(path: String, onChange: @escaping @Sendable () -> Void) {
        #if os(Linux)
        let fd = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        guard fd >= 0, inotify_add_watch(fd, path, UInt32(IN_CLOSE_WRITE | IN_MOVED_TO)) >= 0 else {
            if fd >= 0 { close(fd) }
            source = Self.poll(onChange)
            return
        }
        let read = DispatchSource.makeReadSource(fileDescriptor: fd, queue: .global())
        read.setEventHandler {
            var buffer = [UInt8](repeating: 0, count: 4096)
            while Glibc.read(fd, &buffer, buffer.count) > 0 {}
            onChange()
        }
        read.setCancelHandler { close(fd) }
        read.resume()
        source = read
        #else
        source = Self.poll(onChange)
        #endif
    }

    private static func poll(_ onChange: @escaping @Sendable () -> Void) -> DispatchSourceProtocol {
        let timer = DispatchSource.makeTimerSource(queue: .global())
        timer.schedule(deadline: .now() + 2, repeating: 2)
        timer.setEventHandler(handler: onChange)
        timer.resume()
        return timer
    }

    func stop() { source.cancel() }
}
