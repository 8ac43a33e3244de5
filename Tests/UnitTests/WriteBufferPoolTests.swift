import Foundation
@testable import TransferCore
import XCTest

final class WriteBufferPoolTests: XCTestCase {
    func testBuffersComeInFewSizesAndAreReused() {
        let pool = WriteBuffers()
        XCTAssertEqual(WriteBuffers.sizeClass(4096), 64 << 10)
        XCTAssertEqual(WriteBuffers.sizeClass(100_000), 128 << 10)
        XCTAssertEqual(WriteBuffers.sizeClass(256 << 10), 256 << 10)
        let first = pool.take(byteCount: 200_000)
        XCTAssertEqual(first.count, 256 << 10)
        pool.give(first)
        let again = pool.take(byteCount: 150_000)
        XCTAssertEqual(again.baseAddress, first.baseAddress, "a buffer of the same class is reused")
        // No more than the idle limit is kept: 81 buffers of 256 KiB would be 20.25 MiB.
        let many = (0..<80).map { _ in pool.take(byteCount: 256 << 10) }
        many.forEach(pool.give)
        pool.give(again)
        XCTAssertEqual(pool.idleBytes, WriteBuffers.idleLimit)
        let back = pool.take(byteCount: 256 << 10)
        XCTAssertEqual(pool.idleBytes, WriteBuffers.idleLimit - (256 << 10))
        back.deallocate()
    }
}
