import DurationUnits

extension Duration {
    /// `d+hh:mm:ss.mmm`, for traces: fixed width, no locale, no wall clock.
    public var simulationStamp: String {
        let ms = wholeMilliseconds
        let days = ms / 86_400_000
        let rest = ms % 86_400_000
        func pad(_ value: Int64, _ width: Int) -> String {
            let text = String(value)
            return String(repeating: "0", count: max(0, width - text.count)) + text
        }
        return "\(days)+\(pad(rest / 3_600_000, 2)):\(pad(rest / 60000 % 60, 2)):\(pad(rest / 1000 % 60, 2)).\(pad(rest % 1000, 3))"
    }
}
