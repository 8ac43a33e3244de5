import Foundation
@testable import TransferCore
import XCTest

/// The executor whose thread this is (a function: `Thread.current` is not for async code).
func executorName() -> String? { DedicatedThreadExecutor.currentName }

/// What the run loop relies on: code under the executor's preference runs on its thread, and
/// an unstructured task started there (a job's transfer) does not.
final class DedicatedThreadExecutorTests: XCTestCase {
    func testPreferredCodeRunsOnTheThreadAndUnstructuredTasksElsewhere() async throws {
        let executor = DedicatedThreadExecutor(name: "test.dedicated")
        defer { executor.stop() }
        let (inside, afterSuspension, child, unstructured) = await withTaskExecutorPreference(executor) {
            let inside = executorName()
            try? await Task.sleep(nanoseconds: 1_000_000)
            let afterSuspension = executorName()
            async let child = executorName()
            let unstructured = await Task { executorName() }.value
            return (inside, afterSuspension, await child, unstructured)
        }
        XCTAssertEqual(inside, "test.dedicated")
        XCTAssertEqual(afterSuspension, "test.dedicated")
        XCTAssertEqual(child, "test.dedicated")
        XCTAssertNotEqual(unstructured, "test.dedicated")
    }
}
