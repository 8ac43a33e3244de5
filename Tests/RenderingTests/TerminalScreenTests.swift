import XCTest
@testable import transferd

/// How many rows the live area takes when the terminal was made narrower than it was drawn at
/// (the terminal rewraps each line), so the next frame starts at its first row.
final class TerminalScreenTests: XCTestCase {
    func testRowsOfTheLiveAreaAfterAResize() {
        // Drawn at 200 columns, one row each while the width stays or grows.
        XCTAssertEqual(TerminalScreen.rows(of: [150, 120, 0], drawnAt: 200, now: 200), 3)
        XCTAssertEqual(TerminalScreen.rows(of: [150, 120, 0], drawnAt: 200, now: 300), 3)
        // Narrowed to 40: 150 -> 4 rows, 120 -> 3, an empty line still 1.
        XCTAssertEqual(TerminalScreen.rows(of: [150, 120, 0], drawnAt: 200, now: 40), 8)
        // A line exactly as wide as the new width takes one row.
        XCTAssertEqual(TerminalScreen.rows(of: [40, 41], drawnAt: 80, now: 40), 3)
    }

    func testAFrameAfterANarrowingGoesBackOverEveryRewrappedRow() {
        var written: [String] = []
        var columns = 200
        let screen = TerminalScreen(write: { written.append($0) }, columns: { columns })
        screen.draw(permanent: [], live: [String(repeating: "a", count: 150), String(repeating: "b", count: 100)])
        columns = 40
        screen.draw(permanent: [], live: ["short", "lines"])
        // 150 -> 4 rows, 100 -> 3: up 6 from the last row, then cleared below.
        XCTAssertTrue(written[1].hasPrefix("\r\u{1B}[6A"), written[1].debugDescription)
        screen.draw(permanent: [], live: ["again"])
        XCTAssertTrue(written[2].hasPrefix("\r\u{1B}[1A"), "drawn at 40 now: one row each")
    }
}
