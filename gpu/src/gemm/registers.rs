//! The registers a thread of the warp-specialized kernels has, which their warpgroups trade.

/// Registers a thread of a ping-pong kernel: what its entry declares (`.maxnreg`, which
/// `build.rs` writes, so that 384 threads fit the register file), then what the producer
/// warpgroup keeps and what each consumer warpgroup takes (`setmaxnreg`): the copies need
/// few, the accumulators of a 128×128 fp32 tile 128.
pub const PING_PONG_REGISTERS: PingPongRegisters = PingPongRegisters {
    entry: 168,
    producer: 40,
    consumer: 232,
};
const _: () = {
    let r = PING_PONG_REGISTERS;
    assert!(384 * r.entry <= 65536 && 128 * r.producer + 256 * r.consumer <= 65536);
    assert!(r.producer.is_multiple_of(8) && r.consumer.is_multiple_of(8));
    assert!(r.producer >= 24 && r.consumer <= 256);
};

/// See [`PING_PONG_REGISTERS`].
#[derive(Clone, Copy, Debug)]
pub struct PingPongRegisters {
    pub entry: u32,
    pub producer: u32,
    pub consumer: u32,
}
