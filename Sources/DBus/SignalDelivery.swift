/// What a `Bus.signalDeliveries` stream carries.
public enum SignalDelivery: Sendable {
    case signal(Message)
    /// This many signals were dropped here because the consumer fell behind.
    case lost(Int)
}
