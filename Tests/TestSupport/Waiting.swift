import Foundation
import XCTest

/// Polls `condition` every 50 ms for up to `timeout` seconds.
package func waitUntil(timeout: TimeInterval = 20, _ condition: () throws -> Bool) async throws {
    let deadline = Date().addingTimeInterval(timeout)
    while Date() < deadline {
        if try condition() { return }
        try await Task.sleep(nanoseconds: 50_000_000)
    }
    XCTFail("condition not met within \(timeout) s")
}
