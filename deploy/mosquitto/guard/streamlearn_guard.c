/*
 * streamlearn_guard: a Mosquitto 2.0 plugin (plugin API v5) that keeps device accounts out
 * of what Mosquitto's acl_file cannot refuse.
 *
 *   1. Shared subscriptions. acl_file grants every SUBSCRIBE and checks read rights only
 *      when it delivers a message: a device subscribed to
 *      $share/streamlearn/streamlearn/+/samples joins the ingest group, is handed its share
 *      of the samples, fails the read check, and the broker drops them after the publisher
 *      got its PUBACK. Here a `$share/...` SUBSCRIBE from an account that is not a role is
 *      refused at once (SUBACK "not authorized").
 *   2. Retained messages. Nothing in streamlearn needs a device's retained message, and each
 *      one is kept in the broker's memory (and its persistence file) until cleared. Here a
 *      PUBLISH or a will with the retain flag from an account that is not a role is refused
 *      (MQTT v5: PUBACK "not authorized"; a will is not sent), and a retained message a
 *      device left before this plugin was loaded is not delivered (check_retain_source).
 *
 * Each kind of refusal is logged at most once a second (`throttle`), that line counting the
 * refusals of its kind that were not logged since the previous one, and a topic is cut to
 * 100 characters: a flood of refused SUBSCRIBEs costs a line a second, not a line a filter.
 *
 * Everything else is deferred to the acl_file, which runs after this plugin. Options:
 *
 *   plugin_opt_roles ingest actor learner    accounts allowed both (the stack's roles;
 *                                            required: the plugin refuses to start without)
 *
 * Build (headers from Debian's mosquitto-dev, or Alpine's mosquitto-dev):
 *   cc -shared -fPIC -O2 -Wall -o streamlearn_guard.so streamlearn_guard.c
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mosquitto.h>
#include <mosquitto_broker.h>
#include <mosquitto_plugin.h>

#define MAX_ROLES 32

static mosquitto_plugin_id_t *plugin_id;
static char *role_names;          /* the option's value, split in place */
static const char *roles[MAX_ROLES];
static int role_count;

/* One kind of refusal's log: when it last wrote a line, and how many it has not logged since.
 * The broker calls plugins from its one main thread, so no lock. */
struct throttle {
	time_t last;
	unsigned long suppressed;
};
static struct throttle shared_log, retain_log;

/* Whether this refusal may be logged now; if not, it is counted for the next line. */
static bool throttle_pass(struct throttle *t)
{
	time_t now = time(NULL);
	if(t->last != 0 && now - t->last < 1){
		t->suppressed++;
		return false;
	}
	t->last = now;
	return true;
}

static bool is_role(const char *username)
{
	if(username == NULL) return false;
	for(int i = 0; i < role_count; i++){
		if(strcmp(username, roles[i]) == 0) return true;
	}
	return false;
}

static int acl_check(int event, void *event_data, void *userdata)
{
	struct mosquitto_evt_acl_check *ed = event_data;
	const char *username = mosquitto_client_username(ed->client);
	(void)event;
	(void)userdata;

	if(is_role(username)) return MOSQ_ERR_PLUGIN_DEFER;
	if(ed->access == MOSQ_ACL_SUBSCRIBE && strncmp(ed->topic, "$share/", 7) == 0){
		if(throttle_pass(&shared_log)){
			mosquitto_log_printf(MOSQ_LOG_NOTICE,
					"streamlearn_guard: refused shared subscription %.100s to client %.100s "
					"(user %.100s; %lu suppressed since the last such line)", ed->topic,
					mosquitto_client_id(ed->client), username ? username : "-",
					shared_log.suppressed);
			shared_log.suppressed = 0;
		}
		return MOSQ_ERR_ACL_DENIED;
	}
	if(ed->access == MOSQ_ACL_WRITE && ed->retain){
		if(throttle_pass(&retain_log)){
			mosquitto_log_printf(MOSQ_LOG_NOTICE,
					"streamlearn_guard: refused retained message on %.100s from client %.100s "
					"(user %.100s; %lu suppressed since the last such line)", ed->topic,
					mosquitto_client_id(ed->client), username ? username : "-",
					retain_log.suppressed);
			retain_log.suppressed = 0;
		}
		return MOSQ_ERR_ACL_DENIED;
	}
	return MOSQ_ERR_PLUGIN_DEFER;
}

int mosquitto_plugin_version(int supported_version_count, const int *supported_versions)
{
	for(int i = 0; i < supported_version_count; i++){
		if(supported_versions[i] == 5) return 5;
	}
	return -1;
}

int mosquitto_plugin_init(mosquitto_plugin_id_t *identifier, void **userdata,
		struct mosquitto_opt *options, int option_count)
{
	char *save = NULL;
	(void)userdata;

	plugin_id = identifier;
	for(int i = 0; i < option_count; i++){
		if(strcmp(options[i].key, "roles") != 0) continue;
		free(role_names);
		role_names = strdup(options[i].value);
		if(role_names == NULL) return MOSQ_ERR_NOMEM;
		role_count = 0;
		for(char *name = strtok_r(role_names, " \t,", &save); name != NULL;
				name = strtok_r(NULL, " \t,", &save)){
			if(role_count == MAX_ROLES){
				mosquitto_log_printf(MOSQ_LOG_ERR, "streamlearn_guard: more than %d roles", MAX_ROLES);
				return MOSQ_ERR_INVAL;
			}
			roles[role_count++] = name;
		}
	}
	if(role_count == 0){
		mosquitto_log_printf(MOSQ_LOG_ERR,
				"streamlearn_guard: plugin_opt_roles is missing (e.g. plugin_opt_roles ingest actor learner)");
		return MOSQ_ERR_INVAL;
	}
	mosquitto_log_printf(MOSQ_LOG_INFO, "streamlearn_guard: %d role accounts may share-subscribe and retain",
			role_count);
	return mosquitto_callback_register(plugin_id, MOSQ_EVT_ACL_CHECK, acl_check, NULL, NULL);
}

int mosquitto_plugin_cleanup(void *userdata, struct mosquitto_opt *options, int option_count)
{
	(void)userdata;
	(void)options;
	(void)option_count;
	mosquitto_callback_unregister(plugin_id, MOSQ_EVT_ACL_CHECK, acl_check, NULL);
	free(role_names);
	role_names = NULL;
	role_count = 0;
	return MOSQ_ERR_SUCCESS;
}
