#include "kvroom/messages/registration.hpp"

#include "kvroom/api/errors.hpp"
#include "kvroom/messages/room_messages.hpp"

namespace kvroom {

void add_message_types(caf::actor_system_config& cfg) {
  // CAF 0.17's add_error_category<T> does not compile; give the renderer.
  cfg.add_error_category(kvroom_error_atom::value,
                         [](uint8_t code, caf::atom_value,
                            const caf::message& ctx) {
                           auto out = "kvroom: " + to_string(static_cast<errc>(code));
                           if (ctx.match_elements<std::string>())
                             out += ": " + ctx.get_as<std::string>(0);
                           return out;
                         });
  cfg.add_message_type<kv_poll>("kvroom.kv_poll")
    .add_message_type<rank_ref>("kvroom.rank_ref")
    .add_message_type<kv_transfer_error>("kvroom.kv_transfer_error")
    .add_message_type<mem_desc>("kvroom.mem_desc")
    .add_message_type<paged_buffer>("kvroom.paged_buffer")
    .add_message_type<memory_layout>("kvroom.memory_layout")
    .add_message_type<shm_region>("kvroom.shm_region")
    .add_message_type<device_region>("kvroom.device_region")
    .add_message_type<endpoint_desc>("kvroom.endpoint_desc")
    .add_message_type<transport_control>("kvroom.transport_control")
    .add_message_type<rank_down>("kvroom.rank_down")
    .add_message_type<write_op>("kvroom.write_op")
    .add_message_type<strided_write>("kvroom.strided_write")
    .add_message_type<write_batch>("kvroom.write_batch")
    .add_message_type<sender_init>("kvroom.sender_init")
    .add_message_type<sender_chunk>("kvroom.sender_chunk")
    .add_message_type<receiver_init>("kvroom.receiver_init")
    .add_message_type<room_abort>("kvroom.room_abort")
    .add_message_type<room_clear>("kvroom.room_clear")
    .add_message_type<room_event>("kvroom.room_event")
    .add_message_type<dst_info>("kvroom.dst_info")
    .add_message_type<transfer_started>("kvroom.transfer_started")
    .add_message_type<transfer_done>("kvroom.transfer_done")
    .add_message_type<source_ready>("kvroom.source_ready")
    .add_message_type<reads_done>("kvroom.reads_done")
    .add_message_type<chunk_landed>("kvroom.chunk_landed")
    .add_message_type<room_landed>("kvroom.room_landed")
    .add_message_type<room_failed>("kvroom.room_failed")
    .add_message_type<room_fenced>("kvroom.room_fenced")
    .add_message_type<room_concluded>("kvroom.room_concluded")
    .add_message_type<room_opened>("kvroom.room_opened")
    .add_message_type<take_failure>("kvroom.take_failure")
    .add_message_type<failure_reply>("kvroom.failure_reply")
    .add_message_type<get_stats>("kvroom.get_stats")
    .add_message_type<manager_stats>("kvroom.manager_stats")
    .add_message_type<rank_entry>("kvroom.rank_entry")
    .add_message_type<register_rank>("kvroom.register_rank")
    .add_message_type<registry_hello>("kvroom.registry_hello")
    .add_message_type<registry_challenge>("kvroom.registry_challenge")
    .add_message_type<link_hello>("kvroom.link_hello")
    .add_message_type<link_reply>("kvroom.link_reply")
    .add_message_type<link_finish>("kvroom.link_finish")
    .add_message_type<link_ack>("kvroom.link_ack")
    .add_message_type<link_close>("kvroom.link_close")
    .add_message_type<link_closed>("kvroom.link_closed")
    .add_message_type<directory_update>("kvroom.directory_update")
    .add_message_type<transfer_job>("kvroom.transfer_job")
    .add_message_type<transfer_jobs>("kvroom.transfer_jobs")
    .add_message_type<read_job>("kvroom.read_job")
    .add_message_type<read_op>("kvroom.read_op")
    .add_message_type<read_batch>("kvroom.read_batch")
    .add_message_type<transfer_result>("kvroom.transfer_result")
    .add_message_type<part_done>("kvroom.part_done")
    .add_message_type<room_committed>("kvroom.room_committed")
    .add_message_type<control_bundle>("kvroom.control_bundle");
}

} // namespace kvroom
