import CCurl
import Foundation

/// One thread driving one curl multi handle.
///
/// Other threads hand it exchanges to start or cancel through locked queues
/// and `curl_multi_wakeup`; everything else (perform, completion, callbacks)
/// happens on the loop's own thread.
// @unchecked: `running` and the multi handle are used only on the loop's own thread; other threads hand
// work over through the `Locked` inbox and wake the loop with curl_multi_wakeup.
final class CurlLoop: @unchecked Sendable {
    private let multi: UnsafeMutableRawPointer
    private let incoming = Locked<[CurlExchange]>([])
    private let cancellations = Locked<[CurlExchange]>([])
    private let counters = Locked((active: 0, stopping: false))
    /// Only touched on the loop thread.
    private var running: [UnsafeMutableRawPointer: CurlExchange] = [:]

    init(index: Int) {
        multi = curl_multi_init()
        // Keep enough idle connections around for segmented downloads from a few hosts.
        tdc_multi_setopt_long(multi, CURLMOPT_MAXCONNECTS, 64)
        let thread = Thread { [self] in run() }
        thread.name = "transferd.curl.\(index)"
        thread.start()
    }

    var activeCount: Int { counters.withLock { $0.active } }

    func add(_ exchange: CurlExchange) {
        counters.withLock { $0.active += 1 }
        incoming.withLock { $0.append(exchange) }
        curl_multi_wakeup(multi)
    }

    func cancel(_ exchange: CurlExchange) {
        exchange.markCancelled()
        cancellations.withLock { $0.append(exchange) }
        curl_multi_wakeup(multi)
    }

    /// Ends the thread once no exchange is running.
    func stop() {
        counters.withLock { $0.stopping = true }
        curl_multi_wakeup(multi)
    }

    private func run() {
        var stillRunning: Int32 = 0
        while true {
            for exchange in incoming.withLock({ queue in defer { queue = [] }; return queue }) {
                if exchange.isCancelled {
                    finish(exchange, code: CURLE_ABORTED_BY_CALLBACK, attached: false)
                    continue
                }
                running[exchange.easy] = exchange
                curl_multi_add_handle(multi, exchange.easy)
            }
            for exchange in cancellations.withLock({ queue in defer { queue = [] }; return queue })
            where running[exchange.easy] != nil {
                finish(exchange, code: CURLE_ABORTED_BY_CALLBACK, attached: true)
            }

            curl_multi_perform(multi, &stillRunning)

            var queued: Int32 = 0
            while let message = curl_multi_info_read(multi, &queued) {
                guard message.pointee.msg == CURLMSG_DONE, let easy = message.pointee.easy_handle,
                      let exchange = running[easy] else { continue }
                finish(exchange, code: message.pointee.data.result, attached: true)
            }

            // Receives paused by their own rate limits go on when due; the poll wakes for the next.
            var nextResume = UInt64.max
            let now = DispatchTime.now().uptimeNanoseconds
            for exchange in running.values {
                if let due = exchange.resumeIfDue(now: now) { nextResume = min(nextResume, due) }
            }
            let state = counters.current
            if state.stopping && state.active == 0 { break }
            let timeout = nextResume == .max ? 1000 : Int32(max(1, min(1000, (nextResume &- now) / 1_000_000)))
            curl_multi_poll(multi, nil, 0, timeout, nil)
        }
        curl_multi_cleanup(multi)
    }

    private func finish(_ exchange: CurlExchange, code: CURLcode, attached: Bool) {
        if attached {
            curl_multi_remove_handle(multi, exchange.easy)
            running[exchange.easy] = nil
        }
        counters.withLock { $0.active -= 1 }
        exchange.complete(code: code)
    }
}
