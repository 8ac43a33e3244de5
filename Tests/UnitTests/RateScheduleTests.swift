import Foundation
import TransferCore
import XCTest

/// `transferd limit`'s values: a rate, UP:DOWN, off and timetables, read and kept.
final class RateScheduleTests: XCTestCase {
    func testALimitIsOneRateForBothDirectionsOrOneForEach() throws {
        XCTAssertEqual(try RateLimit.parse("10M"), RateLimit(total: 10 << 20))
        XCTAssertEqual(try RateLimit.parse("1M:off"), RateLimit(up: 1 << 20))
        XCTAssertEqual(try RateLimit.parse("off:512K"), RateLimit(down: 512 << 10))
        XCTAssertEqual(try RateLimit.parse("2M:4M"), RateLimit(up: 2 << 20, down: 4 << 20))
        XCTAssertEqual(try RateLimit.parse("OFF"), .off)
        XCTAssertEqual(try RateLimit.parse("off:off"), .off)
        // What `limit` writes back reads the same.
        for text in ["10M", "1M:off", "off:512K", "1536K", "1000", "off"] {
            XCTAssertEqual(try RateLimit.parse(text).text, text)
        }
        XCTAssertEqual(RateLimit(total: 3 << 19).described, "1.5 MiB/s for uploads and downloads together")
        XCTAssertEqual(RateLimit(up: 1 << 20).described, "uploads 1 MiB/s, downloads unlimited")
        XCTAssertEqual(RateLimit(total: 4 << 20).map { $0 / 4 }, RateLimit(total: 1 << 20))
    }

    func testMistakesSayWhatToWrite() {
        for (text, said) in [("10X", "'10X' is not a rate"), ("0", "'0' is not a rate"), ("1M:2M:3M", "more than one ':'"),
                             ("", "no limit given"), ("8:00", "is not a rate"), ("25:00,1M", "is not a timetable entry"),
                             ("08:00,1M 08:00,2M", "names 08:00 twice"), ("08:00,1M 19:00", "is not a timetable entry"),
                             ("08:60,1M", "is not a timetable entry"), ("08:00,fast", "'fast' is not a rate")] {
            XCTAssertThrowsError(try RateSchedule.parse(text), text) { error in
                XCTAssertTrue("\(error)".contains(said), "\(text): \(error)")
            }
        }
    }

    func testATimetableHoldsEachLimitUntilTheNextAndPastMidnight() throws {
        let schedule = try RateSchedule.parse("19:00,off  08:00,512K 12:30,2M:4M")
        XCTAssertTrue(schedule.isTimetable)
        XCTAssertEqual(schedule.text, "08:00,512K 12:30,2M:4M 19:00,off")
        XCTAssertEqual(try RateSchedule.parse(schedule.text), schedule)
        XCTAssertEqual(schedule.limit(atMinute: 8 * 60), RateLimit(total: 512 << 10))
        XCTAssertEqual(schedule.limit(atMinute: 12 * 60 + 29), RateLimit(total: 512 << 10))
        XCTAssertEqual(schedule.limit(atMinute: 12 * 60 + 30), RateLimit(up: 2 << 20, down: 4 << 20))
        XCTAssertEqual(schedule.limit(atMinute: 23 * 60), .off)
        // Before the first entry, the last one of the day before still holds.
        XCTAssertEqual(schedule.limit(atMinute: 7 * 60 + 59), .off)
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let morning = calendar.date(from: DateComponents(year: 2026, month: 12, day: 6, hour: 9, minute: 15))!
        XCTAssertEqual(schedule.limit(at: morning, calendar: calendar), RateLimit(total: 512 << 10))
        // One limit is no timetable.
        XCTAssertFalse(try RateSchedule.parse("1M:off").isTimetable)
        XCTAssertEqual(try RateSchedule.parse(" 1M:off ").text, "1M:off")
    }

    func testTheRunsBucketsFollowTheLimitWhileTransfersHoldThem() {
        let bandwidth = RunBandwidth()
        // Unlimited: nothing waits, however much is taken.
        XCTAssertEqual(bandwidth.down.take(100 << 20), 0)
        XCTAssertNil(bandwidth.down.bytesPerSecond)
        // One rate for both: downloads and uploads draw on one bucket (64 KiB of burst).
        bandwidth.apply(RateLimit(total: 64 << 10))
        XCTAssertEqual(bandwidth.down.bytesPerSecond, Double(64 << 10))
        XCTAssertEqual(bandwidth.down.take(64 << 10), 0, accuracy: 0.05)
        XCTAssertGreaterThan(bandwidth.up.take(64 << 10), 0.9, "the upload waits for what the download took")
        // One each: an unlimited direction never waits, the other keeps its own rate.
        bandwidth.apply(RateLimit(up: 64 << 10))
        XCTAssertEqual(bandwidth.down.take(10 << 20), 0)
        XCTAssertEqual(bandwidth.up.take(64 << 10), 0, accuracy: 0.05)
        XCTAssertGreaterThan(bandwidth.up.take(64 << 10), 0.9)
        bandwidth.apply(.off)
        XCTAssertEqual(bandwidth.up.take(10 << 20), 0)
        XCTAssertEqual(bandwidth.limit, .off)
    }
}
