"""kvroom's vLLM connector's decisions, without vLLM: the scheduler role
(which request loads, sends or cancels what) and the rules of what the
worker tells vLLM when."""

import types

import pytest

from kvroom.vllm.scheduler_side import (PREFILL_DP_RANK, ROOM, KvroomScheduler, room_of)
from kvroom.vllm.worker_side import FinishedTracker, kv_buffers, layer_buffers


def request(rid, prompt_len, params, status="FINISHED_LENGTH_CAPPED", computed=None):
    return types.SimpleNamespace(
        request_id=rid, prompt_token_ids=list(range(prompt_len)), kv_transfer_params=params,
        status=types.SimpleNamespace(name=status),
        num_computed_tokens=prompt_len if computed is None else computed)


class Blocks:
    def __init__(self, unhashed):
        self.unhashed = unhashed

    def get_unhashed_block_ids(self):
        return list(self.unhashed)

    def get_block_ids(self):
        return (list(self.unhashed),)


def step(scheduled, cached=(), new_blocks=(), resumed=()):
    """vLLM's SchedulerOutput, the parts the scheduler role reads."""
    return types.SimpleNamespace(
        num_scheduled_tokens=dict(scheduled),
        scheduled_cached_reqs=types.SimpleNamespace(req_ids=list(cached),
                                                    new_block_ids=list(new_blocks),
                                                    resumed_req_ids=set(resumed)))


def test_layer_by_layer_opens_the_room_in_the_step_that_completes_the_prompt():
    s = KvroomScheduler(block_size=16, layerwise=True)
    r = request("p", 40, {"do_remote_decode": True, ROOM: 77}, status="RUNNING", computed=0)
    s.update_state_after_alloc(r, Blocks([5, 6]), 0)
    # A first chunk of 32 tokens: the prompt is not complete yet.
    assert not s.build_connector_meta(step({"p": 32})).saves
    r.num_computed_tokens = 32
    # The last 8: one more block, and the room opens before the pass.
    meta = s.build_connector_meta(step({"p": 8}, cached=["p"], new_blocks=[([9],)]))
    assert [(x.req_id, x.room, x.block_ids) for x in meta.saves] == [("p", 77, [5, 6, 9])]
    r.status = types.SimpleNamespace(name="FINISHED_LENGTH_CAPPED")
    r.num_computed_tokens = 40
    delay, params = s.request_finished(r, [5, 6, 9])
    # Held, named the same room, and not sent again whole.
    assert delay and params[ROOM] == 77
    assert not s.build_connector_meta().sends


def test_layer_by_layer_a_prefill_aborted_after_its_room_opened_is_held_until_it_concludes():
    s = KvroomScheduler(block_size=16, layerwise=True)
    r = request("p", 16, {"do_remote_decode": True}, status="RUNNING", computed=0)
    s.update_state_after_alloc(r, Blocks([3]), 0)
    assert len(s.build_connector_meta(step({"p": 16})).saves) == 1
    r.status = types.SimpleNamespace(name="FINISHED_ABORTED")
    assert s.request_finished(r, [3]) == (True, None)
    meta = s.build_connector_meta()
    assert [d.req_id for d in meta.drops] == ["p"] and not meta.sends


def test_without_layerwise_nothing_opens_before_the_request_finished():
    s = KvroomScheduler(block_size=16)
    r = request("p", 16, {"do_remote_decode": True}, status="RUNNING", computed=0)
    s.update_state_after_alloc(r, Blocks([3]), 0)
    assert not s.build_connector_meta(step({"p": 16})).saves


def test_prefill_holds_the_computed_blocks_and_names_the_room():
    s = KvroomScheduler(block_size=16, dp_rank=3)
    r = request("a", 40, {"do_remote_decode": True})
    delay, params = s.request_finished(r, [7, 8, 9, 10])
    assert delay is True
    assert params["do_remote_prefill"] and not params["do_remote_decode"]
    assert params[PREFILL_DP_RANK] == 3 and room_of(params) is not None
    meta = s.build_connector_meta()
    # 40 tokens: three blocks of 16 hold them; the fourth is not sent.
    assert [(x.req_id, x.room, x.block_ids) for x in meta.sends] == [("a", params[ROOM], [7, 8, 9])]
    assert not s.build_connector_meta().sends  # each plan once


def test_prefill_keeps_a_room_the_proxy_named_and_opens_none_when_aborted():
    s = KvroomScheduler(block_size=16)
    delay, params = s.request_finished(request("a", 16, {"do_remote_decode": True, ROOM: "42"}),
                                       [1])
    assert delay and params[ROOM] == 42
    delay, params = s.request_finished(
        request("b", 16, {"do_remote_decode": True}, status="FINISHED_ABORTED"), [2])
    assert (delay, params) == (False, None)
    assert [x.req_id for x in s.build_connector_meta().sends] == ["a"]


def test_decode_loads_the_tokens_beyond_its_hit_once():
    s = KvroomScheduler(block_size=16)
    params = {"do_remote_prefill": True, ROOM: 5, PREFILL_DP_RANK: 1}
    r = request("d", 100, params, status="WAITING")
    assert s.get_num_new_matched_tokens(r, 32) == (68, True)
    assert s.get_num_new_matched_tokens(r, 32) == (68, True)  # no side effect
    s.update_state_after_alloc(r, Blocks([11, 12, 13, 14, 15]), 68)
    s.update_state_after_alloc(r, Blocks([11, 12, 13, 14, 15]), 0)  # vLLM's second call
    meta = s.build_connector_meta()
    assert len(meta.recvs) == 1
    rs = meta.recvs[0]
    assert (rs.room, rs.block_ids, rs.prefix_tokens, rs.prefill_dp_rank) == (5, [11, 12, 13, 14, 15], 32, 1)
    assert s.get_num_new_matched_tokens(r, 32) == (0, False)
    # Finishing later opens nothing more (vLLM frees its blocks once the
    # worker says the load ended).
    assert s.request_finished(r, [11]) == (False, None)
    assert not s.build_connector_meta().cancels


def test_decode_ended_before_its_load_cancels_the_room():
    s = KvroomScheduler(block_size=16)
    r = request("d", 50, {"do_remote_prefill": True, ROOM: 9}, status="FINISHED_ABORTED")
    assert s.request_finished(r, []) == (False, None)
    meta = s.build_connector_meta()
    assert [(c.room, c.prefill_dp_rank) for c in meta.cancels] == [(9, 0)]


def test_params_that_name_no_room_are_not_kvroom_s():
    s = KvroomScheduler(block_size=16)
    for bad in (None, {}, {"do_remote_prefill": True}, {"do_remote_prefill": True, ROOM: -1},
                {"do_remote_prefill": True, ROOM: "x"}, {"do_remote_prefill": True, ROOM: 1 << 63}):
        r = request("d", 50, bad, status="WAITING")
        assert s.get_num_new_matched_tokens(r, 0) == (0, False)
    with pytest.raises(ValueError):
        KvroomScheduler(block_size=0)


def test_finished_sends_wait_for_vllm_to_name_them_and_errors_come_with_their_request():
    t = FinishedTracker()
    meta = types.SimpleNamespace(sends=[types.SimpleNamespace(req_id="p1"),
                                        types.SimpleNamespace(req_id="p2")])
    t.submit(meta)
    # p1's room concluded before vLLM named it finished: held back.
    assert t.step(set(), [("sent", "p1", True)]) == (None, None)
    assert t.step({"p1", "x"}, []) == ({"p1"}, None)
    # Named first, concluded later.
    assert t.step({"p2"}, []) == (None, None)
    assert t.step(set(), [("sent", "p2", False)]) == ({"p2"}, None)
    # A failed load: finished receiving, its blocks errors in the same pass.
    assert t.step(set(), [("recv_failed", "d1", [4, 5]), ("recv_ok", "d2", None)]) == (
        None, {"d1", "d2"})
    assert t.take_load_errors() == {4, 5} and t.take_load_errors() == set()
    # Nothing of what passed is kept.
    assert not (t._open or t._concluded or t._named)


def test_kv_buffers_split_k_and_v_per_layer():
    torch = pytest.importorskip("torch")
    flash = torch.zeros(2, 10, 16, 2, 8, dtype=torch.float16)
    blocks_first = torch.zeros(10, 2, 16, 2, 8, dtype=torch.float16)
    out = kv_buffers({"a": flash, "b": blocks_first}, 10)
    page = 16 * 2 * 8 * 2
    assert out == [(flash[0].data_ptr(), 10 * page, page), (flash[1].data_ptr(), 10 * page, page),
                   (blocks_first.data_ptr(), 10 * 2 * page, 2 * page)]
    with pytest.raises(ValueError):
        kv_buffers({"c": torch.zeros(3, 5)}, 10)
    with pytest.raises(ValueError):
        kv_buffers({"d": flash.transpose(0, 1)}, 10)


def test_layer_buffers_name_each_layers_k_and_v():
    np = pytest.importorskip("numpy")

    class T:
        def __init__(self, shape):
            self.shape = shape

    kv = {"l0": T((2, 10, 16, 2, 8)), "l1": T((10, 16, 64)), "l2": T((2, 10, 4))}
    assert layer_buffers(kv, 10) == {"l0": [0, 1], "l1": [2], "l2": [3, 4]}
    assert np is not None
